package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReceiverType is the forge whose webhooks a TerraformRunReceiver takes.
// +kubebuilder:validation:Enum=Gitea;GitHub;GitLab
type ReceiverType string

const (
	// ReceiverGitea takes Gitea's and Forgejo's webhooks, signed with
	// HMAC-SHA256 of the body (X-Gitea-Signature, X-Forgejo-Signature).
	ReceiverGitea ReceiverType = "Gitea"
	// ReceiverGitHub takes GitHub's webhooks, signed with HMAC-SHA256 of the
	// body (X-Hub-Signature-256).
	ReceiverGitHub ReceiverType = "GitHub"
	// ReceiverGitLab takes GitLab's webhooks, which carry the secret token
	// itself (X-Gitlab-Token).
	ReceiverGitLab ReceiverType = "GitLab"
)

// ReceiverEvent is a kind of forge event a receiver acts on.
// +kubebuilder:validation:Enum=push;tag;pull_request
type ReceiverEvent string

const (
	// ReceiverPush is a push to a branch.
	ReceiverPush ReceiverEvent = "push"
	// ReceiverTag is a tag pushed or moved.
	ReceiverTag ReceiverEvent = "tag"
	// ReceiverPullRequest is a pull request opened, pushed to, reopened or
	// closed: with spec.previews, a plan-only preview of its head commit.
	ReceiverPullRequest ReceiverEvent = "pull_request"
)

// Labels and annotations of pull-request previews. The labels are outside
// infra.opr8r.io/, which admission keeps from every writer of TerraformRuns
// (opr8r-reserved-labels), the manager included; a tenant who labels a run
// of theirs as a preview only lowers its place in the queue and has it
// reported to their own forge.
const (
	// PreviewOfLabel names the TerraformRun a preview previews.
	PreviewOfLabel = "preview.opr8r.io/of"
	// PullRequestLabel is the preview's pull request number.
	PullRequestLabel = "preview.opr8r.io/pull-request"
	// PreviewAnnotation holds what the preview reports to: the receiver,
	// the repository, the pull request and the head commit (JSON). The
	// forge's address is the receiver's (spec.previews.apiURL), never this.
	PreviewAnnotation = "infra.opr8r.io/preview"
	// PreviewCommentAnnotation is the ID of the preview's comment on the
	// pull request, edited in place.
	PreviewCommentAnnotation = "infra.opr8r.io/preview-comment"
	// PreviewFinalizer holds a preview the manager made until it has told
	// the forge (its comment and commit status) that the tracked run was
	// deleted, or given up after PreviewCloseAttempts tries: a forge that
	// is down never holds a namespace's deletion for long.
	PreviewFinalizer = "preview.opr8r.io/forge"
	// PreviewCloseAttemptsAnnotation counts the tries to tell the forge a
	// preview closed.
	PreviewCloseAttemptsAnnotation = "infra.opr8r.io/preview-close-attempts"
	// PreviewReportedAnnotation is the last state reported (run ID and
	// phase), so that each is reported once.
	PreviewReportedAnnotation = "infra.opr8r.io/preview-reported"
	// PreviewSealAnnotation is the manager's seal of a preview it made or
	// moved: an HMAC under the manager's key of the preview's namespace,
	// name, receiver, pull request, repository, head commit, tracked run's
	// UID and spec. The preview reporter reports nothing else.
	PreviewSealAnnotation = "infra.opr8r.io/preview-seal"
)

// Default caps of a receiver's previews.
const (
	// DefaultMaxPreviewsPerRun is spec.previews.maxPerRun's default.
	DefaultMaxPreviewsPerRun = 10
	// DefaultMaxPreviewsPerNamespace is spec.previews.maxPerNamespace's
	// default.
	DefaultMaxPreviewsPerNamespace = 50
)

// Default API addresses of the forges that have one.
const (
	// DefaultGitHubAPIURL is GitHub.com's REST API.
	DefaultGitHubAPIURL = "https://api.github.com"
	// DefaultGitLabAPIURL is GitLab.com (the client adds /api/v4).
	DefaultGitLabAPIURL = "https://gitlab.com"
)

// ReceiverPreviews configures pull-request previews.
// +kubebuilder:validation:XValidation:rule="has(self.tokenSecretRef) != has(self.githubApp)",message="spec.previews: set exactly one of tokenSecretRef and githubApp"
type ReceiverPreviews struct {
	// APIURL is the forge's API address, the only address the manager
	// sends the forge's token to: for GitHub https://api.github.com (the
	// default) or GitHub Enterprise's https://<host>/api/v3; for GitLab
	// the server's root, https://gitlab.com (the default) or
	// https://<host>; for Gitea (and Forgejo) the server's root,
	// https://<host>, required. Neither a webhook nor a preview
	// TerraformRun decides where the token goes.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^\\\\s/?#]+(/[^\\\\s?#]*)?$')",message="spec.previews.apiURL: an http or https URL without spaces, query or fragment"
	// +optional
	APIURL string `json:"apiURL,omitempty"`

	// TokenSecretRef names a Secret in the receiver's namespace whose key
	// `token` is a forge API token that may set commit statuses and comment
	// on pull requests (Gitea: a token with write:repository and
	// write:issue; GitHub: a token with statuses and pull requests (or
	// issues) write; GitLab: a token with the api scope). Set it or
	// githubApp.
	// +optional
	TokenSecretRef *LocalObjectReference `json:"tokenSecretRef,omitempty"`

	// GitHubApp reports as a GitHub App's installation (GitHub only),
	// instead of with a token.
	// +optional
	GitHubApp *GitHubAppAuth `json:"githubApp,omitempty"`

	// MaxPerRun caps the previews of one tracked TerraformRun (open pull
	// requests against its branch); a pull request over the cap is not
	// previewed, and its commit status says why.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxPerRun int32 `json:"maxPerRun,omitempty"`

	// MaxPerNamespace caps the previews of the receiver's namespace, of
	// every tracked run.
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxPerNamespace int32 `json:"maxPerNamespace,omitempty"`

	// DashboardURLs link a preview's comment and commit status to its run
	// in a dashboard, by engine (argo, tekton, job): a URL in which
	// {namespace} and {child} (the run's Workflow, PipelineRun or Job) are
	// replaced, for example
	// https://argo.example.com/workflows/{namespace}/{child} or
	// https://tekton.example.com/#/namespaces/{namespace}/pipelineruns/{child}.
	// +kubebuilder:validation:MaxProperties=3
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['argo', 'tekton', 'job'])",message="spec.previews.dashboardURLs: the keys are engines: argo, tekton or job"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].matches('^https?://[^\\\\s]+$') && size(self[k]) <= 512)",message="spec.previews.dashboardURLs: each is an http or https URL without spaces, at most 512 characters"
	// +optional
	DashboardURLs map[string]string `json:"dashboardURLs,omitempty"`
}

// GitHubAppAuth is a GitHub App installation that previews report as.
type GitHubAppAuth struct {
	// AppID is the App's ID.
	// +kubebuilder:validation:Minimum=1
	AppID int64 `json:"appID"`
	// InstallationID is the App's installation on the repository's owner.
	// +kubebuilder:validation:Minimum=1
	InstallationID int64 `json:"installationID"`
	// PrivateKeySecretRef names a Secret in the receiver's namespace whose
	// key `privateKey` is the App's private key (PEM).
	PrivateKeySecretRef LocalObjectReference `json:"privateKeySecretRef"`
}

// SourcePushAnnotation is set on a TerraformRun by a receiver: the commit a
// push moved the tracked branch or tag to. A TerraformRun whose last run
// already used that commit starts nothing; otherwise it starts a run
// (SourceChange) at once, without waiting for spec.interval. The value is
// a commit SHA (40 or 64 hex digits).
const SourcePushAnnotation = "infra.opr8r.io/source-push"

// SourcePushSkippedAnnotation is set by a receiver beside
// SourcePushAnnotation when the push changed no file the run's
// spec.source.git.paths match: "<commit> <why>". While it names the commit
// of SourcePushAnnotation, the run takes that push without a plan and
// records it in status.lastSkippedPush.
const SourcePushSkippedAnnotation = "infra.opr8r.io/source-push-skipped"

// ReasonNoPathMatched is status.lastSkippedPush's reason for a push that
// changed no file spec.source.git.paths match.
const ReasonNoPathMatched = "NoPathMatched"

// TerraformRunReceiverSpec says which forge's webhooks a receiver takes, how
// they are verified, and which TerraformRuns of its namespace a push wakes.
// +kubebuilder:validation:XValidation:rule="self.type != 'Gitea' || !has(self.previews) || has(self.previews.apiURL)",message="spec.previews.apiURL: required for Gitea: the Gitea server's root URL, for example https://gitea.example.com"
// +kubebuilder:validation:XValidation:rule="!has(self.previews) || !has(self.previews.githubApp) || self.type == 'GitHub'",message="spec.previews.githubApp: only for type GitHub"
type TerraformRunReceiverSpec struct {
	// Type is the forge: Gitea (and Forgejo), GitHub or GitLab.
	Type ReceiverType `json:"type"`

	// Events are the events acted on: push (a branch moved) and tag (a tag
	// pushed). Other events (a ping, a pull request) are verified and
	// answered without effect.
	// +kubebuilder:default={push}
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +optional
	Events []ReceiverEvent `json:"events,omitempty"`

	// SecretRef names a Secret in the receiver's namespace whose key
	// `token` is the webhook's secret: the key of Gitea's and GitHub's
	// HMAC signatures, GitLab's secret token. It is also part of the
	// receiver's unguessable path (status.webhookPath), made from the
	// token the receiver first had; a rotated token takes effect at once,
	// at the same path. At least 16 characters; leading and trailing
	// whitespace (a --from-file newline) is not part of it.
	SecretRef LocalObjectReference `json:"secretRef"`

	// Previews, with the pull_request event, plans each open pull request
	// against a TerraformRun's tracked branch (from the same repository)
	// in a plan-only preview TerraformRun, and reports it on the forge: a
	// commit status on the head commit and one comment, edited in place.
	// Gitea (and Forgejo), GitHub and GitLab report.
	// +optional
	Previews *ReceiverPreviews `json:"previews,omitempty"`

	// RunSelector limits the TerraformRuns a push may wake, in the
	// receiver's namespace (unset: all of them). Of those, a push wakes the
	// ones whose spec.source.git.url is the pushed repository and whose
	// spec.source.git.ref is the pushed branch or tag.
	// +optional
	RunSelector *metav1.LabelSelector `json:"runSelector,omitempty"`
}

// TerraformRunReceiverStatus is where the receiver listens.
type TerraformRunReceiverStatus struct {
	// ObservedGeneration is the generation this status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// WebhookPath is the path on the manager's webhook server that takes
	// this receiver's webhooks: /hook/ and the SHA-256 of the token, the
	// receiver's name and namespace, made once, when the receiver first
	// has a token, and kept when the token rotates, so that the forge's
	// configuration keeps working. Give the forge
	// https://<the opr8r-webhook Service's address><webhookPath>.
	// +optional
	WebhookPath string `json:"webhookPath,omitempty"`

	// Conditions: Ready says whether the receiver takes webhooks.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Pushes are the deliveries the webhook server took, oldest first: each
	// is recorded here within the forge's request (one write, with
	// optimistic concurrency), and the receiver's reconciler wakes the
	// TerraformRuns that track it after the answer. A delivery whose id or
	// payload is here already is answered 200 duplicate and changes
	// nothing. Entries are kept for --webhook-delivery-ttl (at most
	// MaxReceivedPushes of them).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Pushes []ReceivedPush `json:"pushes,omitempty"`
}

// MaxReceivedPushes is the most deliveries a receiver's status keeps.
const MaxReceivedPushes = 100

// ReceivedPushState says where a received delivery stands.
// +kubebuilder:validation:Enum=Pending;Done;Stale
type ReceivedPushState string

const (
	// PushPending: recorded, the tracking TerraformRuns not woken yet.
	PushPending ReceivedPushState = "Pending"
	// PushDone: the tracking TerraformRuns were woken (or the event needs
	// no fan-out, such as a pull request's).
	PushDone ReceivedPushState = "Done"
	// PushStale: an older push than one already handled (its commit was
	// already handled, or is the before of a push already handled); it
	// wakes nothing.
	PushStale ReceivedPushState = "Stale"
)

// ReceivedPush is one delivery a receiver took.
type ReceivedPush struct {
	// Delivery is the forge's id of the delivery (X-GitHub-Delivery,
	// X-Gitea-Delivery, GitLab's Idempotency-Key or X-Gitlab-Event-UUID);
	// empty when the forge sent none.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Delivery string `json:"delivery,omitempty"`

	// Digest is the SHA-256 of the payload (hex). The delivery id is not
	// signed; the payload is, so a replay under a fresh id is caught here.
	// +kubebuilder:validation:MaxLength=64
	Digest string `json:"digest"`

	// ReceivedAt is when the webhook server took it.
	ReceivedAt metav1.Time `json:"receivedAt"`

	// Event is the kind of event: push, tag or pull_request.
	Event ReceiverEvent `json:"event"`

	// Ref is the branch or tag's short name.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Ref string `json:"ref,omitempty"`

	// Repos are the pushed repository's URLs, as the forge gave them.
	// +kubebuilder:validation:MaxItems=4
	// +optional
	Repos []string `json:"repos,omitempty"`

	// Before is the commit the ref pointed to before the push (empty: the
	// ref was created).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Before string `json:"before,omitempty"`

	// Commit is the commit the push moved the ref to.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Commit string `json:"commit,omitempty"`

	// Files are the files the push's commits added, modified or removed,
	// for the runs' spec.source.git.paths; kept only while Pending. Unset
	// with FilesKnown false: the payload was truncated or listed none.
	// +kubebuilder:validation:MaxItems=200
	// +optional
	Files []string `json:"files,omitempty"`

	// FilesKnown says whether Files is every file the push changed.
	// +optional
	FilesKnown bool `json:"filesKnown,omitempty"`

	// State is Pending, Done or Stale.
	State ReceivedPushState `json:"state"`

	// Woken is how many TerraformRuns the push woke.
	// +optional
	Woken int32 `json:"woken,omitempty"`

	// Message says why a push is stale, or whom it woke.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}

// TerraformRunReceiver takes a forge's webhooks for the TerraformRuns of its
// namespace: a push to a branch (or a tag) that TerraformRuns track makes
// them look at their source now, instead of at their next spec.interval.
// Each receiver has its own unguessable path, and every request must carry
// the forge's signature (or token) made with the receiver's secret; any
// other request is refused, logged and counted, and starts nothing.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tfreceiver,categories=opr8r
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.status.webhookPath`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TerraformRunReceiver struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the receiver.
	Spec TerraformRunReceiverSpec `json:"spec"`
	// Status is where it listens.
	// +optional
	Status TerraformRunReceiverStatus `json:"status,omitempty"`
}

// TerraformRunReceiverList is a list of TerraformRunReceivers.
//
// +kubebuilder:object:root=true
type TerraformRunReceiverList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the receivers.
	Items []TerraformRunReceiver `json:"items"`
}

// NotifierType is the body a notifier sends.
// +kubebuilder:validation:Enum=Webhook;CloudEvents;Slack
type NotifierType string

const (
	// NotifierWebhook POSTs opr8r's JSON body, signed with HMAC-SHA256
	// (header X-Opr8r-Signature: sha256=<hex>) when the Secret has a
	// `token`.
	NotifierWebhook NotifierType = "Webhook"
	// NotifierCloudEvents POSTs a CloudEvent 1.0 in binary content mode
	// (ce-* headers, the same JSON body as data), signed like Webhook.
	NotifierCloudEvents NotifierType = "CloudEvents"
	// NotifierSlack POSTs a Slack incoming-webhook body ({"text", "blocks"}),
	// which Slack, Mattermost, Rocket.Chat and others take.
	NotifierSlack NotifierType = "Slack"
)

// NotifyEvent is a happening a notifier sends.
// +kubebuilder:validation:Enum=ApprovalRequired;Applied;Failed;DriftDetected;Destroyed
type NotifyEvent string

const (
	// NotifyApprovalRequired: a plan with changes waits at the gate.
	NotifyApprovalRequired NotifyEvent = "ApprovalRequired"
	// NotifyApplied: an apply run applied its plan.
	NotifyApplied NotifyEvent = "Applied"
	// NotifyFailed: a run failed, was rejected or timed out.
	NotifyFailed NotifyEvent = "Failed"
	// NotifyDriftDetected: a scheduled check found drift.
	NotifyDriftDetected NotifyEvent = "DriftDetected"
	// NotifyDestroyed: a destroy run finished (the TerraformRun is going).
	NotifyDestroyed NotifyEvent = "Destroyed"
)

// TerraformRunNotifierSpec says what is sent, where, and for which runs.
type TerraformRunNotifierSpec struct {
	// Type is the body sent: Webhook, CloudEvents or Slack.
	Type NotifierType `json:"type"`

	// SecretRef names a Secret in the notifier's namespace: key `address`
	// is the URL POSTed to (http or https; it is a secret because a Slack
	// URL is a credential), key `token`, if present, the HMAC key of the
	// signature (Webhook, CloudEvents).
	SecretRef LocalObjectReference `json:"secretRef"`

	// Events are the happenings sent (unset: all of them).
	// +listType=set
	// +optional
	Events []NotifyEvent `json:"events,omitempty"`

	// RunSelector limits the TerraformRuns of the notifier's namespace it
	// sends for (unset: all of them); a per-run notifier selects one run by
	// a label of its own.
	// +optional
	RunSelector *metav1.LabelSelector `json:"runSelector,omitempty"`

	// Suspend stops sending.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// TerraformRunNotifierStatus says how deliveries went.
type TerraformRunNotifierStatus struct {
	// ObservedGeneration is the generation this status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready is False, reason DeliveryFailed, while the last
	// delivery failed after its retries, with the destination's answer.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastDelivery is the last delivery tried.
	// +optional
	LastDelivery *NotifierDelivery `json:"lastDelivery,omitempty"`
}

// NotifierDelivery is one delivery of one event.
type NotifierDelivery struct {
	// Event sent.
	Event NotifyEvent `json:"event"`
	// Run is the TerraformRun's name and run ID.
	Run string `json:"run"`
	// At is when it ended.
	At metav1.Time `json:"at"`
	// Attempts made.
	Attempts int32 `json:"attempts"`
	// Succeeded says whether the destination took it (a 2xx answer).
	Succeeded bool `json:"succeeded"`
	// Message is the destination's answer or the error.
	// +optional
	Message string `json:"message,omitempty"`
}

// TerraformRunNotifier sends what happens to the TerraformRuns of its
// namespace (a plan waits for approval, applied, failed, drift, destroyed)
// to a webhook, a CloudEvents sink or a Slack-compatible chat. Deliveries
// are retried with backoff; a destination that fails never holds up a run,
// and shows in this object's Ready condition and an Event.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tfnotifier,categories=opr8r
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Last",type=string,JSONPath=`.status.lastDelivery.event`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TerraformRunNotifier struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what is sent, where.
	Spec TerraformRunNotifierSpec `json:"spec"`
	// Status says how deliveries went.
	// +optional
	Status TerraformRunNotifierStatus `json:"status,omitempty"`
}

// TerraformRunNotifierList is a list of TerraformRunNotifiers.
//
// +kubebuilder:object:root=true
type TerraformRunNotifierList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the notifiers.
	Items []TerraformRunNotifier `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TerraformRunReceiver{}, &TerraformRunReceiverList{}, &TerraformRunNotifier{}, &TerraformRunNotifierList{})
}
