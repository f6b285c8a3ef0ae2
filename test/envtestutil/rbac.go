package envtestutil

import (
	"context"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// AwaitGrant waits until the API server's authorizer grants user (in
// groups) every verb of rules in namespace ns ("" for cluster scope). The
// authorizer learns of new Roles and bindings through its informers, so a
// request made just after creating them may still be forbidden: tests that
// grant rights and then act as the grantee call this in between.
func AwaitGrant(t interface {
	Helper()
	Fatalf(format string, args ...any)
}, admin kubernetes.Interface, ns, user string, groups []string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	for _, rule := range rules {
		for _, verb := range rule.Verbs {
			spec := authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups}
			switch {
			case len(rule.NonResourceURLs) > 0:
				spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: rule.NonResourceURLs[0], Verb: verb}
			case len(rule.Resources) > 0 && len(rule.APIGroups) > 0:
				name := ""
				if len(rule.ResourceNames) > 0 {
					name = rule.ResourceNames[0]
				}
				spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: rule.APIGroups[0], Resource: rule.Resources[0], Name: name}
			default:
				continue
			}
			err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				r, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
				return err == nil && r.Status.Allowed, nil
			})
			if err != nil {
				t.Fatalf("%s was never granted %+v: %v", user, spec, err)
			}
		}
	}
}
