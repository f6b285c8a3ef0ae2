package pipeline

import (
	"fmt"
	"strings"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/results"
)

// What the engines' dashboards show of a child (the Argo UI, the Tekton
// Dashboard): one title, one description and a description of each step,
// the same words on every engine.

// Title names a child for people: "TerraformRun team-a/net: apply #3".
func Title(p *Pipeline) string {
	run := p.Labels[infrav1.RunNameLabel]
	t := fmt.Sprintf("TerraformRun %s/%s: %s", p.Namespace, run, p.Type)
	if n := p.Labels[infrav1.RunNumberLabel]; n != "" {
		t += " #" + n
	}
	return t
}

// ApproveCommand is how a person approves the plan waiting in a child.
func ApproveCommand(p *Pipeline) string {
	return fmt.Sprintf("kubectl tfrun approve %s -n %s", p.Labels[infrav1.RunNameLabel], p.Namespace)
}

// Description says what a child does, how to decide its plan and how to
// find the run's other children. resume names the engine's own way to
// approve ("" when it has none).
func Description(p *Pipeline, resume string) string {
	run := p.Labels[infrav1.RunNameLabel]
	var what string
	switch {
	case p.Type == infrav1.RunDestroy:
		what = "Destroys everything the TerraformRun manages (it is being deleted)."
	case PlanOnly(p.Type):
		what = fmt.Sprintf("Plans only (a %s run): nothing is applied.", p.Type)
	case p.ManualApproval:
		how := ApproveCommand(p)
		if resume != "" {
			how = resume + ", or " + how
		}
		what = fmt.Sprintf("Plans, waits for a person to approve the plan, applies exactly that plan and exports the outputs. Approve: %s.", how)
	default:
		what = "Plans, applies (approval mode Auto) and exports the outputs."
	}
	return fmt.Sprintf("%s Status and history: kubectl tfrun list %s -n %s; all runs of it carry the label %s=%s.",
		what, run, p.Namespace, infrav1.RunNameLabel, run)
}

// StepDescription says what one step does.
func StepDescription(step string) string {
	switch step {
	case names.StepRestoreState:
		return "As the runner: pushes to the state backend the states earlier runs kept because the backend did not take them, oldest first, before anything plans."
	case names.StepClone:
		return "Fetches the module from spec.source into the run's workspace."
	case names.StepInit:
		return "terraform init: providers, modules and the state backend."
	case names.StepPlan:
		return "terraform plan: saves the plan, its digest and its summary (+add ~change -destroy)."
	case names.StepApprove:
		return "Waits for a person to approve the plan whose digest it shows; reject skips apply."
	case names.StepApply:
		return "terraform apply of exactly the approved plan (its digest is checked)."
	case names.StepExport:
		return "Writes terraform's outputs to the run's outputs Secret."
	case names.StepCleanup:
		return "Always runs last: releases a state lock left behind and removes the saved plan."
	}
	if names.IsCheck(step) {
		return fmt.Sprintf("Plan check %s (spec.checks): fails the run before the approval if the plan breaks it.", strings.TrimPrefix(step, names.CheckPrefix))
	}
	return ""
}

// GateMessage is what the approval step says while it waits: the plan's
// summary (the plan step's summary result, JSON) and digest, and how to
// decide. resume names the engine's own way to approve ("" when it has none).
func GateMessage(run, namespace, summaryJSON, digest, resume string) string {
	summary := "with changes"
	if pl, err := results.ParsePlan(func(n string) string {
		if n == results.Summary {
			return summaryJSON
		}
		return ""
	}); err == nil && summaryJSON != "" {
		summary = pl.Short()
	}
	how := fmt.Sprintf("kubectl tfrun approve %s -n %s --plan %s", run, namespace, digest)
	if resume != "" {
		how = resume + ", or " + how
	}
	return fmt.Sprintf("Plan %s (%s) waits for approval. Approve: %s. Reject: kubectl tfrun reject %s -n %s --reason '…'. See the plan: kubectl tfrun plan %s -n %s.",
		summary, digest, how, run, namespace, run, namespace)
}
