package integration

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	tektonpod "github.com/tektoncd/pipeline/pkg/apis/pipeline/pod"
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Tekton runs a PipelineRun's TaskRuns as taskRunTemplate.serviceAccountName
// or a taskRunSpec's, and (pipelines in pipelines) makes a child
// PipelineRun of a pipeline task's embedded pipelineSpec, whose TaskRuns it
// labels as the child's tasks' taskSpec metadata says, as Tekton's
// controller (which may create TaskRuns with opr8r's labels).
// opr8r-tekton-objects read the metadata of the first level only.
var _ = Describe("Tekton templates: a tenant's PipelineRun cannot run as the runner or label TaskRuns as opr8r's through taskRunSpecs, podTemplate or a nested pipelineSpec", Ordered, ContinueOnFailure, func() {
	ctx := context.Background()
	const tenantUser = "tekton-templates-tenant"
	var (
		ns     string
		tenant client.Client
	)
	BeforeAll(func() {
		ns = newNamespace()
		tenantRoles(ns, tenantUser)
		tenant = as(tenantUser)
	})
	taskSpec := func(meta map[string]string) *tektonv1.EmbeddedTask {
		return &tektonv1.EmbeddedTask{Metadata: tektonv1.PipelineTaskMetadata{Labels: meta},
			TaskSpec: tektonv1.TaskSpec{Steps: []tektonv1.Step{{Name: "s", Image: "busybox"}}}}
	}
	pr := func(name string, spec *tektonv1.PipelineSpec, mutate ...func(*tektonv1.PipelineRun)) *tektonv1.PipelineRun {
		p := &tektonv1.PipelineRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: tektonv1.PipelineRunSpec{PipelineSpec: spec}}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	plain := func() *tektonv1.PipelineSpec {
		return &tektonv1.PipelineSpec{Tasks: []tektonv1.PipelineTask{{Name: "t", TaskSpec: taskSpec(nil)}}}
	}
	child := func(spec *tektonv1.PipelineSpec) *tektonv1.PipelineSpec {
		return &tektonv1.PipelineSpec{Tasks: []tektonv1.PipelineTask{{Name: "child", PipelineSpec: spec}}}
	}

	It("refuses taskRunTemplate's and taskRunSpecs' runner service accounts, and admits a podTemplate (it has none)", func() {
		refused(tenant.Create(ctx, pr("tpl-sa", plain(), func(p *tektonv1.PipelineRun) { p.Spec.TaskRunTemplate.ServiceAccountName = runnerSA })),
			tenantUser+" may not create pipelineruns tpl-sa running as runner service account opr8r-runner")
		refused(tenant.Create(ctx, pr("spec-sa", plain(), func(p *tektonv1.PipelineRun) {
			p.Spec.TaskRunSpecs = []tektonv1.PipelineTaskRunSpec{{PipelineTaskName: "t", ServiceAccountName: runnerSA}}
		})), "running as runner service account opr8r-runner")
		refused(tenant.Create(ctx, pr("child-sa", child(plain()), func(p *tektonv1.PipelineRun) { p.Spec.TaskRunTemplate.ServiceAccountName = runnerSA })),
			"running as runner service account opr8r-runner")
		admitted(tenant.Create(ctx, pr("pod-template", plain(), func(p *tektonv1.PipelineRun) {
			p.Spec.TaskRunTemplate.PodTemplate = &tektonpod.Template{NodeSelector: map[string]string{"pool": "tenant"}}
			p.Spec.TaskRunSpecs = []tektonv1.PipelineTaskRunSpec{{PipelineTaskName: "t", PodTemplate: &tektonpod.Template{SchedulerName: "default-scheduler"}}}
		})))
	})
	It("refuses a nested pipelineSpec's task metadata carrying opr8r's labels", func() {
		refused(tenant.Create(ctx, pr("child-meta", child(&tektonv1.PipelineSpec{Tasks: []tektonv1.PipelineTask{{Name: "t",
			TaskSpec: taskSpec(map[string]string{"infra.opr8r.io/run": "tk"})}}}))),
			tenantUser+" may not create pipelineruns child-meta putting opr8r's labels or annotations (infra.opr8r.io/) on its TaskRuns")
		refused(tenant.Create(ctx, &tektonv1.Pipeline{ObjectMeta: metav1.ObjectMeta{Name: "child-meta", Namespace: ns},
			Spec: *child(&tektonv1.PipelineSpec{Finally: []tektonv1.PipelineTask{{Name: "f", TaskSpec: taskSpec(map[string]string{"infra.opr8r.io/step": "plan"})}}})}),
			"may not create pipelines child-meta putting opr8r's labels")
	})
	It("refuses a pipelineSpec embedded deeper, which it cannot follow", func() {
		refused(tenant.Create(ctx, pr("grandchild", child(child(plain())))),
			"with a pipelineSpec embedded in a pipeline task's pipelineSpec (task child)")
	})
	It("admits a tenant's own nested pipelineSpec", func() {
		admitted(tenant.Create(ctx, pr("own-child", child(&tektonv1.PipelineSpec{Tasks: []tektonv1.PipelineTask{{Name: "t", TaskSpec: taskSpec(map[string]string{"team": "a"})}}}),
			func(p *tektonv1.PipelineRun) { p.Spec.TaskRunTemplate.ServiceAccountName = "app" })))
	})
})
