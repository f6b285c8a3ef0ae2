package step

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// TestWriteSecretLabels: a step's Secrets carry opr8r's labels, and the
// run's shard when it has one, so only that shard's manager caches them.
func TestWriteSecretLabels(t *testing.T) {
	cases := map[string]struct {
		shard string
		want  map[string]string
	}{
		"no shard": {want: map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: infrav1.ComponentRawOutputs}},
		"a shard": {shard: "blue", want: map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: infrav1.ComponentRawOutputs,
			infrav1.ShardLabel: "blue"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientset()
			k := &Kube{Client: c, Namespace: "team-a", Shard: tc.shard}
			if err := k.WriteSecret(context.Background(), "r-1-tfoutputs", infrav1.ComponentRawOutputs, map[string][]byte{"outputs.json": []byte("{}")}); err != nil {
				t.Fatal(err)
			}
			got, err := c.CoreV1().Secrets("team-a").Get(context.Background(), "r-1-tfoutputs", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
		})
	}
}
