package plugin

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

func newGraphCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "graph",
		Short: "Show the namespace's TerraformRuns in dependency order (spec.dependsOn) with each one's state; -o dot for Graphviz, -o json|yaml",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.graph(cmd.Context()) },
	}
}

// GraphNode is one TerraformRun of `kubectl tfrun graph`.
type GraphNode struct {
	// Namespace and Name are the run's.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Layer is its place in dependency order: 0 depends on nothing, n on
	// runs of layers below n; -1 is a run in or behind a cycle.
	Layer  int    `json:"layer"`
	Engine string `json:"engine,omitempty"`
	Phase  string `json:"phase,omitempty"`
	Ready  string `json:"ready,omitempty"`
	// Waiting is why its next run cannot start, from DependenciesReady.
	Waiting string `json:"waiting,omitempty"`
	// Missing is true for a dependency that does not exist.
	Missing bool `json:"missing,omitempty"`
	// Trigger is why its latest run started (DependencyChange names the
	// dependency in TriggerDetail).
	Trigger       string `json:"trigger,omitempty"`
	TriggerDetail string `json:"triggerDetail,omitempty"`
}

// GraphEdge says that To depends on From, taking Outputs from it.
type GraphEdge struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Outputs string `json:"outputs,omitempty"`
}

// Graph is `kubectl tfrun graph -o json`.
type Graph struct {
	Namespace string      `json:"namespace"`
	Nodes     []GraphNode `json:"nodes"`
	Edges     []GraphEdge `json:"edges"`
}

func (o *Options) graph(ctx context.Context) error {
	c, _, ns, err := o.clients()
	if err != nil {
		return err
	}
	g, err := buildGraph(ctx, c, ns)
	if err != nil {
		return err
	}
	if o.Output == "dot" {
		return writeDot(o.Out, g)
	}
	if done, err := o.print(g); done {
		return err
	}
	if len(g.Nodes) == 0 {
		fmt.Fprintf(o.ErrOut, "No TerraformRuns found in namespace %s.\n", ns)
		return nil
	}
	deps := map[string][]string{}
	for _, e := range g.Edges {
		d := e.From
		if e.Outputs != "" {
			d += " (" + e.Outputs + ")"
		}
		deps[e.To] = append(deps[e.To], d)
	}
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "LAYER\tRUN\tENGINE\tPHASE\tREADY\tLAST TRIGGER\tDEPENDS ON")
	for _, n := range g.Nodes {
		layer := fmt.Sprint(n.Layer)
		switch {
		case n.Missing:
			layer = "?"
		case n.Layer < 0:
			layer = "cycle"
		}
		phase := dash(n.Phase)
		if n.Missing {
			phase = "(missing)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", layer, nodeID(ns, n), dash(n.Engine), phase, dash(n.Ready),
			dash(triggerOf(n)), dash(strings.Join(deps[nodeID(ns, n)], ", ")))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, n := range g.Nodes {
		if n.Waiting != "" {
			fmt.Fprintf(o.Out, "%s: %s\n", nodeID(ns, n), oneLine(n.Waiting, 200))
		}
	}
	return nil
}

func triggerOf(n GraphNode) string {
	if n.Trigger == string(infrav1.TriggerDependencyChange) && n.TriggerDetail != "" {
		return n.Trigger + " (" + strings.TrimPrefix(n.TriggerDetail, "dependency ") + ")"
	}
	return n.Trigger
}

// nodeID names a node: its name, or namespace/name outside ns.
func nodeID(ns string, n GraphNode) string {
	if n.Namespace == ns {
		return n.Name
	}
	return n.Namespace + "/" + n.Name
}

// buildGraph reads the namespace's TerraformRuns, and the dependencies they
// name in other namespaces, and orders them in layers.
func buildGraph(ctx context.Context, c client.Client, ns string) (Graph, error) {
	g := Graph{Namespace: ns}
	list := &infrav1.TerraformRunList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return g, err
	}
	runs := map[string]*infrav1.TerraformRun{}
	for i := range list.Items {
		r := &list.Items[i]
		runs[r.Namespace+"/"+r.Name] = r
	}
	missing := map[string]bool{}
	for i := range list.Items {
		r := &list.Items[i]
		for _, d := range r.Spec.DependsOn {
			key, err := resolveDependency(ctx, c, r, d, runs, missing)
			if err != nil {
				return g, err
			}
			g.Edges = append(g.Edges, GraphEdge{From: shortKey(ns, key), To: shortKey(ns, r.Namespace+"/"+r.Name), Outputs: outputsOf(d.Outputs)})
		}
	}
	layers := layerOf(runs)
	for key, r := range runs {
		g.Nodes = append(g.Nodes, graphNode(r, layers[key]))
	}
	for key := range missing {
		dns, name, _ := strings.Cut(key, "/")
		g.Nodes = append(g.Nodes, GraphNode{Namespace: dns, Name: name, Layer: -1, Missing: true})
	}
	g.sort(ns)
	return g, nil
}

// resolveDependency returns the key of a dependency of r, read into runs
// unless it is there, or noted missing when it is gone or out of reach.
func resolveDependency(ctx context.Context, c client.Client, r *infrav1.TerraformRun, d infrav1.Dependency, runs map[string]*infrav1.TerraformRun, missing map[string]bool) (string, error) {
	dns := d.Namespace
	if dns == "" {
		dns = r.Namespace
	}
	key := dns + "/" + d.Name
	if _, ok := runs[key]; ok || missing[key] {
		return key, nil
	}
	other := &infrav1.TerraformRun{}
	err := c.Get(ctx, client.ObjectKey{Namespace: dns, Name: d.Name}, other)
	switch {
	case err == nil:
		runs[key] = other
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		missing[key] = true
	default:
		return "", err
	}
	return key, nil
}

// graphNode is a run's node in its layer.
func graphNode(r *infrav1.TerraformRun, layer int) GraphNode {
	n := GraphNode{Namespace: r.Namespace, Name: r.Name, Layer: layer, Phase: r.Status.Phase}
	if cur := r.Status.Run; cur != nil {
		n.Engine, n.Trigger, n.TriggerDetail = string(cur.Engine), string(cur.Trigger), cur.TriggerDetail
	}
	if c := apimeta.FindStatusCondition(r.Status.Conditions, infrav1.ReadyCondition); c != nil {
		n.Ready = string(c.Status)
	}
	if c := apimeta.FindStatusCondition(r.Status.Conditions, infrav1.DependenciesReadyCondition); c != nil && c.Status != "True" {
		n.Waiting = c.Message
	}
	return n
}

// sort orders the nodes by rank, layer and name, and the edges by their
// ends, as printed.
func (g *Graph) sort(ns string) {
	sort.Slice(g.Nodes, func(i, j int) bool {
		a, b := g.Nodes[i], g.Nodes[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		if a.Layer != b.Layer {
			return a.Layer < b.Layer
		}
		return nodeID(ns, a) < nodeID(ns, b)
	})
	sort.SliceStable(g.Edges, func(i, j int) bool {
		if g.Edges[i].To != g.Edges[j].To {
			return g.Edges[i].To < g.Edges[j].To
		}
		return g.Edges[i].From < g.Edges[j].From
	})
}

// rank orders runs in layers first, then runs in cycles, then missing ones.
func rank(n GraphNode) int {
	switch {
	case n.Missing:
		return 2
	case n.Layer < 0:
		return 1
	}
	return 0
}

func shortKey(ns, key string) string {
	return strings.TrimPrefix(key, ns+"/")
}

// outputsOf says what a dependency gives: "all outputs", "vpc_id→vpc",
// or "" (ordering only).
func outputsOf(o *infrav1.DependencyOutputs) string {
	switch {
	case o == nil:
		return ""
	case o.All:
		return "all outputs"
	}
	var s []string
	for _, v := range o.Select {
		if v.As != "" && v.As != v.Output {
			s = append(s, v.Output+"→"+v.As)
		} else {
			s = append(s, v.Output)
		}
	}
	return strings.Join(s, ", ")
}

// layerOf places each run one layer above its highest dependency; runs in
// a cycle, or depending on one, get -1. A missing dependency is left out.
func layerOf(runs map[string]*infrav1.TerraformRun) map[string]int {
	layer := map[string]int{}
	const visiting = -2
	var visit func(key string) int
	visit = func(key string) int {
		if l, ok := layer[key]; ok {
			if l == visiting {
				return -1
			}
			return l
		}
		r := runs[key]
		layer[key] = visiting
		l := 0
		for _, d := range r.Spec.DependsOn {
			dns := d.Namespace
			if dns == "" {
				dns = r.Namespace
			}
			dk := dns + "/" + d.Name
			if _, ok := runs[dk]; !ok {
				continue
			}
			dl := visit(dk)
			if dl < 0 {
				l = -1
				break
			}
			if dl+1 > l {
				l = dl + 1
			}
		}
		layer[key] = l
		return l
	}
	keys := slices.Sorted(maps.Keys(runs))
	for _, k := range keys {
		visit(k)
	}
	return layer
}

// writeDot writes the graph in Graphviz's dot language: an arrow from each
// dependency to its dependent (the way outputs flow), labelled with what
// it gives; each run coloured by Ready.
func writeDot(w io.Writer, g Graph) error {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %q {\n  rankdir=LR;\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\"];\n", g.Namespace)
	for _, n := range g.Nodes {
		id := nodeID(g.Namespace, n)
		if n.Missing {
			fmt.Fprintf(&b, "  %q [label=%q, style=\"dashed\", color=\"gray50\"];\n", id, id+"\n(missing)")
			continue
		}
		label := id + "\n" + strings.Join(nonEmpty(n.Engine, n.Phase, readyLabel(n.Ready)), " · ")
		fmt.Fprintf(&b, "  %q [label=%q, fillcolor=%q];\n", id, label, readyColor(n.Ready, n.Layer))
	}
	for _, e := range g.Edges {
		if e.Outputs != "" {
			fmt.Fprintf(&b, "  %q -> %q [label=%q];\n", e.From, e.To, e.Outputs)
		} else {
			fmt.Fprintf(&b, "  %q -> %q [style=dashed];\n", e.From, e.To)
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func nonEmpty(s ...string) []string {
	var out []string
	for _, x := range s {
		if x != "" {
			out = append(out, x)
		}
	}
	return out
}

func readyLabel(r string) string {
	if r == "" {
		return ""
	}
	return "Ready=" + r
}

func readyColor(ready string, layer int) string {
	switch {
	case layer < 0:
		return "mistyrose"
	case ready == "True":
		return "palegreen"
	case ready == "False":
		return "lightcoral"
	}
	return "lightyellow"
}
