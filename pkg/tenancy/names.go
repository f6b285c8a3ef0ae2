// Package tenancy owns the names that keep tenants apart: every
// ConfigMap, data key, label and annotation opr8r's admission policies
// (config/policy, engines/*/manifests) read, the line format of the lists
// they read, and the rule that tells a child's name. The manager writes the
// guard lists through it (Guard). TestContract parses every policy, fails
// on a name a policy reads that Go does not define, and compiles every CEL
// expression as the API server does.
package tenancy

// The guard list: in every namespace where it runs children, the manager
// keeps the ConfigMap opr8r-guard, whose data key children lists the names
// of its children that may still have pods (one per line). Every object
// made for a child (its pods, TaskRuns, step Jobs, Secrets, ConfigMaps) has
// a name that starts with the child's name and a dash. opr8r's admission
// policies read the list as a parameter (config/policy/runner-guard.yaml):
// where they cannot see the object (a CONNECT to pods/exec sees only the
// pod's name) or where the object does not exist yet (a name squatted
// before opr8r uses it), the name tells them it is opr8r's. A child is
// listed before it is created and dropped once it settled; only the manager
// may write the ConfigMap.
const (
	GuardConfigMap   = "opr8r-guard"
	GuardChildrenKey = "children"
	// GuardRunnersKey lists the service accounts opr8r's step pods run as
	// in the namespace (the default runner, the checks', and every
	// spec.runner.serviceAccountName a child used, which must be one of the
	// install's runner service accounts: a name a TerraformRun chose never
	// joins the list): the policies let only their pods' tokens write a
	// listed child's Secrets and results.
	GuardRunnersKey = "runnerServiceAccounts"
)

// The identities: the ConfigMap opr8r-identities in opr8r's namespace,
// written by the installer (config/policy/identities.yaml, the chart),
// names who the policies trust, one per line.
const (
	IdentitiesConfigMap = "opr8r-identities"
	// IdentitiesEngineControllers are the engines' controllers, which
	// alone make runner pods for opr8r's children.
	IdentitiesEngineControllers = "engineControllers"
	// IdentitiesArgoControllers, IdentitiesJobControllers and
	// IdentitiesTektonControllers are each engine's own.
	IdentitiesArgoControllers   = "argoControllers"
	IdentitiesJobControllers    = "jobControllers"
	IdentitiesTektonControllers = "tektonControllers"
	// IdentitiesRunnerServiceAccounts are the install's runner service
	// accounts (GuardRunnersKey copies the ones a namespace uses).
	IdentitiesRunnerServiceAccounts = "runnerServiceAccounts"
	// IdentitiesProviderCacheClaim names the provider cache's claim,
	// which runner pods may mount read-only.
	IdentitiesProviderCacheClaim = "providerCacheClaim"
)

// The runner policy: the ConfigMap the installer gives
// opr8r-runner-restrictions (config/policy/runner-restrictions.yaml),
// bounding what a TerraformRun's runner may ask for.
const (
	RunnerPolicyNamespaces             = "namespaces"
	RunnerPolicyAllowedImages          = "allowedImages"
	RunnerPolicyAllowedServiceAccounts = "allowedServiceAccounts"
	RunnerPolicyAllowedNodeSelectors   = "allowedNodeSelectors"
	RunnerPolicyAllowedTolerations     = "allowedTolerations"
	RunnerPolicyAllowedTokenAudiences  = "allowedTokenAudiences"
	RunnerPolicyMaxCPU                 = "maxCPU"
	RunnerPolicyMaxMemory              = "maxMemory"
	RunnerPolicyMaxWorkspaceSize       = "maxWorkspaceSize"
)

// The prefixes of the labels and annotations opr8r reserves: a tenant may
// not write them on the objects opr8r reads (config/policy/reserved-labels.yaml).
const (
	ReservedPrefix = "infra.opr8r.io/"
	ShardingPrefix = "sharding.opr8r.io/"
	PreviewPrefix  = "preview.opr8r.io/"
)
