package receiver

import (
	"context"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformrunreceivers,verbs=get;list;watch
// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformrunreceivers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformruns,verbs=get;list;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// Resync is how often a receiver's Secret is read again for its Ready
// condition (the webhook server reads a rotated token at once itself).
const Resync = 5 * time.Minute

// Reconciler keeps each receiver's status.webhookPath and Ready, and wakes
// the TerraformRuns that track the pushes the webhook server recorded in
// its status (on the leader, after the forge had its answer).
type Reconciler struct {
	Client client.Client
	// API reads the receivers' Secrets (the manager caches only its own)
	// and lists TerraformRuns (a shard's cache holds only its own).
	API client.Reader
	// Recorder emits Events on the receivers.
	Recorder events.EventRecorder
}

// Reconcile makes the receiver's path from its token, once, and fans out
// its pending pushes.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rcv infrav1.TerraformRunReceiver
	if err := r.Client.Get(ctx, req.NamespacedName, &rcv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if err := r.reconcileReady(ctx, &rcv); err != nil {
		return ctrl.Result{}, err
	}
	if res, err := r.reconcilePushes(ctx, &rcv); err != nil || !res.IsZero() {
		return res, err
	}
	return ctrl.Result{RequeueAfter: Resync}, nil
}

// reconcileReady sets Ready (Receiving; InvalidSpec or TokenNotFound when
// False) and status.webhookPath, which is made once from the token and
// kept when the token rotates or a later error sets Ready False: the
// forge's configuration keeps working.
func (r *Reconciler) reconcileReady(ctx context.Context, rcv *infrav1.TerraformRunReceiver) error {
	old := rcv.DeepCopy()
	cond := metav1.Condition{Type: infrav1.ReadyCondition, ObservedGeneration: rcv.Generation}
	if _, err := ForgeOf(rcv.Spec.Type); err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "InvalidSpec", "spec.type: "+err.Error()
	} else if _, err := metav1.LabelSelectorAsSelector(rcv.Spec.RunSelector); err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "InvalidSpec", "spec.runSelector: "+err.Error()
	} else if tok, err := Token(ctx, r.API, rcv); err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "TokenNotFound", err.Error()
	} else {
		if rcv.Status.WebhookPath == "" {
			rcv.Status.WebhookPath = Path(tok, rcv.Name, rcv.Namespace)
		}
		cond.Status, cond.Reason = metav1.ConditionTrue, "Receiving"
		cond.Message = "the webhook server takes " + string(rcv.Spec.Type) + " webhooks at " + rcv.Status.WebhookPath
	}
	apimeta.SetStatusCondition(&rcv.Status.Conditions, cond)
	rcv.Status.ObservedGeneration = rcv.Generation
	if !apimeta.IsStatusConditionPresentAndEqual(old.Status.Conditions, infrav1.ReadyCondition, cond.Status) ||
		old.Status.WebhookPath != rcv.Status.WebhookPath || old.Status.ObservedGeneration != rcv.Status.ObservedGeneration ||
		apimeta.FindStatusCondition(old.Status.Conditions, infrav1.ReadyCondition).Message != cond.Message {
		// A merge patch of these fields only: status.pushes, which the
		// webhook server appends to, is not in it.
		return r.Client.Status().Patch(ctx, rcv, client.MergeFrom(old))
	}
	return nil
}

// hasPending says whether a receiver has pushes to fan out.
func hasPending(o client.Object) bool {
	rcv, ok := o.(*infrav1.TerraformRunReceiver)
	if !ok {
		return false
	}
	for _, p := range rcv.Status.Pushes {
		if p.State == infrav1.PushPending {
			return true
		}
	}
	return false
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
	if srv.Recorder == nil {
		srv.Recorder = mgr.GetEventRecorder("opr8r-receiver")
	}
	r := &Reconciler{Client: mgr.GetClient(), API: mgr.GetAPIReader(), Recorder: srv.Recorder}
	pending := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return hasPending(e.ObjectNew) }}
	if err := ctrl.NewControllerManagedBy(mgr).Named("terraformrunreceiver").
		For(&infrav1.TerraformRunReceiver{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, pending))).
		Complete(r); err != nil {
		return err
	}
	srv.Cache, srv.API, srv.Writer, srv.Status = mgr.GetCache(), mgr.GetAPIReader(), mgr.GetClient(), mgr.GetClient().Status()
	return mgr.Add(srv)
}
