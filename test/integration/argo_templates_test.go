package integration

import (
	"context"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Argo merges spec.templateDefaults into every template
// (mergedTemplateDefaultsInto) before setupServiceAccount reads the
// template's serviceAccountName, runs a step's or a DAG task's inline
// template as any other, and substitutes parameters ({{...}}, which the
// Workflow's arguments set) into the whole template, service account and
// podSpecPatch included. A tenant's Workflow that named the runner in any
// of those was admitted, and Argo's controller (an engine controller,
// which opr8r-runner-pods and opr8r-provider-cache let create runner pods)
// ran the tenant's image as the runner, with its cloud identity, mounting
// the provider cache. opr8r-argo-objects follows them all.
var _ = Describe("Argo templates: a tenant's Workflow cannot run as the runner through templateDefaults, inline templates, parameters or a WorkflowTemplate", Ordered, ContinueOnFailure, func() {
	ctx := context.Background()
	const tenantUser = "argo-templates-tenant"
	var (
		ns     string
		tenant client.Client
	)
	BeforeAll(func() {
		ns = newNamespace()
		tenantRoles(ns, tenantUser)
		tenant = as(tenantUser)
		for _, sa := range []string{runnerSA, "app"} {
			Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}})).To(Succeed())
		}
	})
	mk := func(name string, mutate func(*wfv1.WorkflowSpec)) *wfv1.Workflow {
		w := &wfv1.Workflow{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: wfv1.WorkflowSpec{Entrypoint: "main", Templates: []wfv1.Template{{Name: "main", Container: &corev1.Container{Image: "busybox"}}}}}
		mutate(&w.Spec)
		return w
	}
	step := func(inline *wfv1.Template) func(*wfv1.WorkflowSpec) {
		return func(s *wfv1.WorkflowSpec) {
			s.Templates[0] = wfv1.Template{Name: "main", Steps: []wfv1.ParallelSteps{{Steps: []wfv1.WorkflowStep{{Name: "s", Inline: inline}}}}}
		}
	}
	task := func(inline *wfv1.Template) func(*wfv1.WorkflowSpec) {
		return func(s *wfv1.WorkflowSpec) {
			s.Templates[0] = wfv1.Template{Name: "main", DAG: &wfv1.DAGTemplate{Tasks: []wfv1.DAGTask{{Name: "t", Inline: inline}}}}
		}
	}
	busybox := func(mutate func(*wfv1.Template)) *wfv1.Template {
		t := &wfv1.Template{Container: &corev1.Container{Image: "busybox"}}
		mutate(t)
		return t
	}

	It("refuses spec.templateDefaults.serviceAccountName naming the runner", func() {
		refused(tenant.Create(ctx, mk("defaults-sa", func(s *wfv1.WorkflowSpec) {
			s.TemplateDefaults = &wfv1.Template{ServiceAccountName: runnerSA}
		})), tenantUser+" may not create workflows defaults-sa running as runner service account opr8r-runner (spec.templateDefaults.serviceAccountName)")
	})
	It("refuses spec.templateDefaults.executor.serviceAccountName naming the runner", func() {
		refused(tenant.Create(ctx, mk("defaults-exec", func(s *wfv1.WorkflowSpec) {
			s.TemplateDefaults = &wfv1.Template{Executor: &wfv1.ExecutorConfig{ServiceAccountName: runnerSA}}
		})), "running as runner service account opr8r-runner (spec.templateDefaults.executor.serviceAccountName)")
	})
	It("refuses spec.templateDefaults.podSpecPatch naming a service account", func() {
		refused(tenant.Create(ctx, mk("defaults-patch", func(s *wfv1.WorkflowSpec) {
			s.TemplateDefaults = &wfv1.Template{PodSpecPatch: `{"serviceAccountName": "opr8r-runner"}`}
		})), "podSpecPatch", "(spec.templateDefaults.podSpecPatch)")
	})
	It("refuses spec.templateDefaults.metadata carrying opr8r's labels", func() {
		refused(tenant.Create(ctx, mk("defaults-meta", func(s *wfv1.WorkflowSpec) {
			s.TemplateDefaults = &wfv1.Template{Metadata: wfv1.Metadata{Labels: map[string]string{"infra.opr8r.io/run": "net"}}}
		})), "infra.opr8r.io/", "(spec.templateDefaults.metadata.labels: infra.opr8r.io/run)")
	})
	It("refuses a step's inline template running as the runner, or labelling its pod as opr8r's", func() {
		refused(tenant.Create(ctx, mk("inline-step", step(busybox(func(t *wfv1.Template) { t.ServiceAccountName = runnerSA })))),
			"running as runner service account opr8r-runner (spec.templates[main].steps[s].inline.serviceAccountName)")
		refused(tenant.Create(ctx, mk("inline-step-exec", step(busybox(func(t *wfv1.Template) { t.Executor = &wfv1.ExecutorConfig{ServiceAccountName: runnerSA} })))),
			"(spec.templates[main].steps[s].inline.executor.serviceAccountName)")
		refused(tenant.Create(ctx, mk("inline-step-meta", step(busybox(func(t *wfv1.Template) {
			t.Metadata = wfv1.Metadata{Annotations: map[string]string{"infra.opr8r.io/step": "plan"}}
		})))), "(spec.templates[main].steps[s].inline.metadata.annotations: infra.opr8r.io/step)")
		refused(tenant.Create(ctx, mk("inline-step-patch", step(busybox(func(t *wfv1.Template) { t.PodSpecPatch = `{"serviceAccountName": "opr8r-runner"}` })))),
			"(spec.templates[main].steps[s].inline.podSpecPatch)")
	})
	It("refuses a DAG task's inline template running as the runner", func() {
		refused(tenant.Create(ctx, mk("inline-dag", task(busybox(func(t *wfv1.Template) { t.ServiceAccountName = runnerSA })))),
			"running as runner service account opr8r-runner (spec.templates[main].dag.tasks[t].inline.serviceAccountName)")
	})
	It("refuses an inline template nested in an inline template, which it cannot follow", func() {
		refused(tenant.Create(ctx, mk("inline-nested", step(&wfv1.Template{DAG: &wfv1.DAGTemplate{Tasks: []wfv1.DAGTask{{Name: "deep",
			Inline: busybox(func(t *wfv1.Template) { t.ServiceAccountName = runnerSA })}}}}))),
			"with an inline template nested in spec.templates[main].steps[s].inline")
	})
	It("refuses a service account, a podSpecPatch or a metadata key that Argo would fill from a parameter", func() {
		param := func(s *wfv1.WorkflowSpec) {
			s.Arguments = wfv1.Arguments{Parameters: []wfv1.Parameter{{Name: "sa", Value: wfv1.AnyStringPtr(runnerSA)}}}
		}
		refused(tenant.Create(ctx, mk("param-sa", func(s *wfv1.WorkflowSpec) { param(s); s.Templates[0].ServiceAccountName = "{{workflow.parameters.sa}}" })),
			"whose spec.templates[main].serviceAccountName is a parameter ({{workflow.parameters.sa}})")
		refused(tenant.Create(ctx, mk("param-wf-sa", func(s *wfv1.WorkflowSpec) { param(s); s.ServiceAccountName = "{{workflow.parameters.sa}}" })),
			"whose spec.serviceAccountName is a parameter")
		refused(tenant.Create(ctx, mk("param-patch", func(s *wfv1.WorkflowSpec) {
			param(s)
			s.Templates[0].PodSpecPatch = `{"{{workflow.parameters.k}}": "{{workflow.parameters.sa}}"}`
		})), "podSpecPatch", "a parameter")
		refused(tenant.Create(ctx, mk("param-label", func(s *wfv1.WorkflowSpec) {
			s.PodMetadata = &wfv1.Metadata{Labels: map[string]string{"{{workflow.parameters.k}}": "net"}}
		})), "with a label or annotation key that is a parameter (spec.podMetadata.labels: {{workflow.parameters.k}})")
	})
	It("refuses a podSpecPatch that could spell a service account without naming it", func() {
		for name, patch := range map[string]string{
			"fold":   `{"ſerviceAccountName": "opr8r-runner"}`,              // Go's JSON decoder folds ſ onto s
			"binary": "? !!binary c2VydmljZUFjY291bnROYW1l\n: opr8r-runner", // YAML decodes the key from base64
		} {
			refused(tenant.Create(ctx, mk("patch-"+name, func(s *wfv1.WorkflowSpec) { s.PodSpecPatch = patch })),
				"with a podSpecPatch that names a service account or holds an escape", "(spec.podSpecPatch)")
		}
	})
	It("refuses a WorkflowTemplate or CronWorkflow that would run as the runner through templateDefaults or an inline template, and so any Workflow that references one", func() {
		refused(tenant.Create(ctx, &wfv1.WorkflowTemplate{ObjectMeta: metav1.ObjectMeta{Name: "wt-defaults", Namespace: ns},
			Spec: mk("", func(s *wfv1.WorkflowSpec) { s.TemplateDefaults = &wfv1.Template{ServiceAccountName: runnerSA} }).Spec}),
			"may not create workflowtemplates wt-defaults running as runner service account opr8r-runner (spec.templateDefaults.serviceAccountName)")
		refused(tenant.Create(ctx, &wfv1.WorkflowTemplate{ObjectMeta: metav1.ObjectMeta{Name: "wt-param", Namespace: ns},
			Spec: mk("", func(s *wfv1.WorkflowSpec) { s.Templates[0].ServiceAccountName = "{{workflow.parameters.sa}}" }).Spec}),
			"may not create workflowtemplates wt-param whose spec.templates[main].serviceAccountName is a parameter")
		refused(tenant.Create(ctx, &wfv1.CronWorkflow{ObjectMeta: metav1.ObjectMeta{Name: "cw-inline", Namespace: ns},
			Spec: wfv1.CronWorkflowSpec{Schedules: []string{"* * * * *"},
				WorkflowSpec: mk("", task(busybox(func(t *wfv1.Template) { t.ServiceAccountName = runnerSA }))).Spec}}),
			"may not create cronworkflows cw-inline running as runner service account opr8r-runner (spec.templates[main].dag.tasks[t].inline.serviceAccountName)")
		By("a tenant's own WorkflowTemplate, and a Workflow that references it")
		admitted(tenant.Create(ctx, &wfv1.WorkflowTemplate{ObjectMeta: metav1.ObjectMeta{Name: "wt-own", Namespace: ns},
			Spec: mk("", func(s *wfv1.WorkflowSpec) { s.TemplateDefaults = &wfv1.Template{ServiceAccountName: "app"} }).Spec}))
		admitted(tenant.Create(ctx, &wfv1.Workflow{ObjectMeta: metav1.ObjectMeta{Name: "from-wt", Namespace: ns},
			Spec: wfv1.WorkflowSpec{WorkflowTemplateRef: &wfv1.WorkflowTemplateRef{Name: "wt-own"}}}))
	})
	It("refuses a ClusterWorkflowTemplate that would run as the runner, even an admin's: opr8r never makes one", func() {
		refused(k8sClient.Create(ctx, &wfv1.ClusterWorkflowTemplate{ObjectMeta: metav1.ObjectMeta{Name: "argo-templates-cwt"},
			Spec: mk("", step(busybox(func(t *wfv1.Template) { t.ServiceAccountName = "{{inputs.parameters.sa}}" }))).Spec}),
			"may not create clusterworkflowtemplates argo-templates-cwt whose spec.templates[main].steps[s].inline.serviceAccountName is a parameter")
	})
	It("admits a tenant's Workflow that uses templateDefaults, inline steps and DAG tasks, parameters and a podSpecPatch of its own", func() {
		admitted(tenant.Create(ctx, mk("own-defaults", func(s *wfv1.WorkflowSpec) {
			s.ServiceAccountName = "app"
			s.Arguments = wfv1.Arguments{Parameters: []wfv1.Parameter{{Name: "msg", Value: wfv1.AnyStringPtr("hello")}}}
			s.TemplateDefaults = &wfv1.Template{ServiceAccountName: "app", Metadata: wfv1.Metadata{Labels: map[string]string{"team": "{{workflow.parameters.msg}}"}},
				PodSpecPatch: `{"containers":[{"name":"main","resources":{"limits":{"cpu":"1"}}}]}`}
			s.Templates = append(s.Templates,
				wfv1.Template{Name: "steps", Steps: []wfv1.ParallelSteps{{Steps: []wfv1.WorkflowStep{{Name: "s",
					Inline: busybox(func(t *wfv1.Template) {
						t.ServiceAccountName = "app"
						t.Container.Args = []string{"{{workflow.parameters.msg}}"}
					})}}}}},
				wfv1.Template{Name: "dag", DAG: &wfv1.DAGTemplate{Tasks: []wfv1.DAGTask{{Name: "t", Inline: busybox(func(*wfv1.Template) {})}, {Name: "u", Template: "main"}}}})
		})))
	})
	It("admits opr8r's manager's Workflows, labelled and running as the runner", func() {
		w := mk("net-9", func(s *wfv1.WorkflowSpec) {
			s.ServiceAccountName = runnerSA
			s.TemplateDefaults = &wfv1.Template{ServiceAccountName: runnerSA}
			s.PodMetadata = &wfv1.Metadata{Labels: opr8rLabels("net")}
		})
		w.Labels = opr8rLabels("net")
		admitted(k8sClient.Create(ctx, w))
	})
})
