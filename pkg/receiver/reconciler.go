package receiver

import (
	"context"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformrunreceivers,verbs=get;list;watch
// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformrunreceivers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// Resync is how often a receiver's Secret is read again: a new token gives
// the receiver a new path.
const Resync = 5 * time.Minute

// Reconciler keeps each receiver's status.webhookPath and Ready.
type Reconciler struct {
	Client client.Client
	// API reads the receivers' Secrets (the manager caches only its own).
	API client.Reader
}

// Reconcile makes the receiver's path from its token.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rcv infrav1.TerraformRunReceiver
	if err := r.Client.Get(ctx, req.NamespacedName, &rcv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	old := rcv.DeepCopy()
	cond := metav1.Condition{Type: infrav1.ReadyCondition, ObservedGeneration: rcv.Generation}
	if _, err := ForgeOf(rcv.Spec.Type); err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "InvalidSpec", "spec.type: "+err.Error()
		rcv.Status.WebhookPath = ""
	} else if _, err := metav1.LabelSelectorAsSelector(rcv.Spec.RunSelector); err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "InvalidSpec", "spec.runSelector: "+err.Error()
		rcv.Status.WebhookPath = ""
	} else if tok, err := Token(ctx, r.API, &rcv); err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "TokenNotFound", err.Error()
		rcv.Status.WebhookPath = ""
	} else {
		rcv.Status.WebhookPath = Path(tok, rcv.Name, rcv.Namespace)
		cond.Status, cond.Reason = metav1.ConditionTrue, "Receiving"
		cond.Message = "the webhook server takes " + string(rcv.Spec.Type) + " webhooks at " + rcv.Status.WebhookPath
	}
	apimeta.SetStatusCondition(&rcv.Status.Conditions, cond)
	rcv.Status.ObservedGeneration = rcv.Generation
	if !apimeta.IsStatusConditionPresentAndEqual(old.Status.Conditions, infrav1.ReadyCondition, cond.Status) ||
		old.Status.WebhookPath != rcv.Status.WebhookPath || old.Status.ObservedGeneration != rcv.Status.ObservedGeneration ||
		apimeta.FindStatusCondition(old.Status.Conditions, infrav1.ReadyCondition).Message != cond.Message {
		if err := r.Client.Status().Patch(ctx, &rcv, client.MergeFrom(old)); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: Resync}, nil
}

// Setup adds the receivers' reconciler, their path index and the webhook
// server srv (which listens on srv.Addr) to mgr; a nil srv, or one whose
// Addr is empty or "0", adds neither reconciler nor server.
func Setup(mgr ctrl.Manager, srv *Server) error {
	if srv == nil || srv.Addr == "" || srv.Addr == "0" {
		return nil
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &infrav1.TerraformRunReceiver{}, PathIndex, func(o client.Object) []string {
		if p := o.(*infrav1.TerraformRunReceiver).Status.WebhookPath; p != "" {
			return []string{p}
		}
		return nil
	}); err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), API: mgr.GetAPIReader()}
	if err := ctrl.NewControllerManagedBy(mgr).Named("terraformrunreceiver").
		For(&infrav1.TerraformRunReceiver{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r); err != nil {
		return err
	}
	srv.Cache, srv.API, srv.Writer = mgr.GetCache(), mgr.GetAPIReader(), mgr.GetClient()
	if srv.Recorder == nil {
		srv.Recorder = mgr.GetEventRecorder("opr8r-receiver")
	}
	return mgr.Add(srv)
}
