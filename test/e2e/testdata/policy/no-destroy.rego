# A plan check for the e2e plan-check scenario (docs/checks.md): no plan
# may destroy a resource without a person deciding it elsewhere. Input is
# `terraform show -json` of the plan (/workspace/plan/plan.json).
package main

import rego.v1

deny contains msg if {
	some rc in input.resource_changes
	"delete" in rc.change.actions
	msg := sprintf("%s would be destroyed: destroying resources needs a person, not a pipeline", [rc.address])
}
