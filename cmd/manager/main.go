// Command manager runs the opr8r controller manager.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/time/rate"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/config/crd"
	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/pkg/controller"
	"github.com/opr8r/opr8r/pkg/egress"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/manager"
	"github.com/opr8r/opr8r/pkg/notify"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/providers"
	"github.com/opr8r/opr8r/pkg/queue"
	"github.com/opr8r/opr8r/pkg/receiver"
	"github.com/opr8r/opr8r/pkg/records/s3"
	"github.com/opr8r/opr8r/pkg/stateapi"
)

// settings are the manager's flags.
type settings struct {
	engines, defaultEngine, namespaces string
	sealKeySecret                      string
	defaultApprovalTimeout             time.Duration
	probeAddr, pprofAddr               string
	leaderElect, installCRDs           bool
	maxConcurrent, burst               int
	qps, memoryLimitRatio              float64
	memoryRelease                      time.Duration
	destroyTimeout, progressTimeout    time.Duration
	maxActiveRuns, maxActiveRunsPerNS  int
	metrics                            manager.MetricsOptions
	minCheckInterval                   time.Duration
	admissionPolicies, crossNSDeps     bool
	shard                              manager.Shard
	cfg                                engine.Config
	objectStore                        s3.Config
	objectStoreCreds                   string
	recordsRetention                   time.Duration
	providerMirrorCA                   string
	stepBinary                         string
	webhookAddr                        string
	stateAPIAddr, stateAPIURL          string
	stateAPISecret                     string
	webhookRate                        float64
	webhookBurst                       int
	webhookDeliveryTTL                 time.Duration
	webhookTokenTTL                    time.Duration
	notifications                      bool
	notifyParallel, notifyPerNS        int
	notifyQueue                        int
	egress                             egressFlags
}

// egressFlags are the guard's flags, as given (docs/notifications.md).
type egressFlags struct {
	podIPs, serviceCIDRs, podCIDRs, deny, allow string
}

func main() {
	var s settings
	all := strings.Join(engineNames(engines.All()), ",")
	flag.StringVar(&s.engines, "engines", all, "Comma-separated engines to enable ("+all+"). An enabled engine whose CRDs are missing leaves its runs Stalled until they are installed.")
	flag.StringVar(&s.defaultEngine, "default-engine", "", "Engine used when spec.engine is empty (empty: the first enabled engine, in the order "+strings.Join(engineNames(engines.All()), ", ")+"); auto picks the first enabled engine whose child kind the cluster serves, in that order.")
	flag.StringVar(&s.cfg.TerraformImage, "terraform-image", engine.DefaultTerraformImage, "Default Terraform or OpenTofu image for steps.")
	flag.StringVar(&s.cfg.StepImage, "step-image", engine.DefaultStepImage, "Image that holds the opr8r-step binary.")
	flag.StringVar(&s.cfg.RunnerServiceAccount, "runner-service-account", engine.DefaultRunnerServiceAccount, "Default service account of step pods (bind it to the opr8r-runner Role).")
	flag.StringVar(&s.cfg.PreviewServiceAccount, "preview-service-account", "", "Service account of every step of a pull request's preview, which runs code anyone who may push a branch wrote: bind it to the opr8r-runner Role and give it a cloud identity that reads no more than a plan needs (empty: the plan's account).")
	flag.StringVar(&s.cfg.PlanServiceAccount, "plan-service-account", "", "Default service account of the steps before the approval gate (clone, init, plan; every step of a run that never applies): give it a cloud identity that may read, not change, and bind it to the opr8r-runner Role (empty: the runner's).")
	flag.StringVar(&s.cfg.CheckServiceAccount, "check-service-account", engine.DefaultCheckServiceAccount, "Service account of check steps, which run images TerraformRuns choose: bind it to the opr8r-check Role (it reads no Secret); empty: checks run as the runner.")
	flag.Func("runner-service-accounts", "Comma-separated other service accounts a TerraformRun's steps may run as (spec.runner.serviceAccountName, planServiceAccountName), besides --runner-service-account, --plan-service-account and --check-service-account: the same names as ConfigMap opr8r-identities' runnerServiceAccounts, which the admission policies guard as runners (the chart's identities.runnerServiceAccounts). A run naming any other account stalls.", func(v string) error {
		for _, sa := range strings.Split(v, ",") {
			if sa = strings.TrimSpace(sa); sa != "" {
				s.cfg.RunnerServiceAccounts = append(s.cfg.RunnerServiceAccounts, sa)
			}
		}
		return nil
	})
	flag.StringVar(&s.stepBinary, "step-binary", manager.StepBinaryAuto, "How terraform steps get opr8r-step: image-volume mounts --step-image into their pods, read-only (Kubernetes image volumes: GA in 1.36, containerd 2.1 or CRI-O 1.31 on the nodes); init-container copies it in a container before the steps of each pod (any Kubernetes, one container more per pod); auto: image-volume where the API server is 1.36 or later.")
	flag.StringVar(&s.cfg.ImagePullPolicy, "image-pull-policy", "", "Pull policy of step containers (empty: cluster default).")
	flag.DurationVar(&s.cfg.PlanTimeout, "default-plan-timeout", pipeline.DefaultPlanTimeout, "Timeout of each step up to the plan, and of checks, for TerraformRuns without spec.timeouts.plan; every step carries its own deadline, so no engine default (Tekton's 60 minutes) applies.")
	flag.DurationVar(&s.cfg.ApplyTimeout, "default-apply-timeout", pipeline.DefaultApplyTimeout, "Timeout of the apply step (and a destroy's) for TerraformRuns without spec.timeouts.apply or .destroy.")
	flag.DurationVar(&s.cfg.StateRetry, "state-retry", 0, "How long an apply keeps saving a state its backend did not take (the backend away at the apply's end) before it keeps it in the run's <child>-errored-state Secret, which the next run pushes (0: the step's default, 10m).")
	flag.StringVar(&s.namespaces, "watch-namespaces", "", "Comma-separated namespaces to watch (empty: all).")
	flag.StringVar(&s.metrics.BindAddress, "metrics-bind-address", manager.DefaultMetricsAddress, "Address of the metrics endpoint (0 disables it).")
	flag.BoolVar(&s.metrics.Secure, "metrics-secure", true, "Serve /metrics over HTTPS, only to a bearer token whose user may get /metrics (ClusterRole opr8r-metrics-reader), checked with the API server (TokenReview, SubjectAccessReview); false: plain HTTP that anyone who reaches the port reads (local development only).")
	flag.StringVar(&s.metrics.CertDir, "metrics-cert-dir", "", "Directory with the metrics endpoint's tls.crt and tls.key (a mounted cert-manager Certificate Secret), reloaded when they change; empty or without them: a self-signed certificate made at start.")
	flag.StringVar(&s.probeAddr, "health-probe-bind-address", ":8081", "Address of the health probes.")
	flag.DurationVar(&s.memoryRelease, "memory-release-interval", 15*time.Second, "How often the manager looks whether a burst (a restart that lists every run, many runs at once) left free heap pages worth returning to the system: at least 16 MiB and a quarter of the live heap (0 leaves it to Go's runtime). docs/performance.md, P4.")
	flag.Float64Var(&s.memoryLimitRatio, "memory-limit-ratio", 0.9, "Soft memory limit for Go's garbage collector, as a fraction of the container's memory limit (0 disables; an explicit GOMEMLIMIT wins).")
	flag.StringVar(&s.pprofAddr, "pprof-bind-address", "", "Address of Go's pprof endpoints, for profiling (empty: disabled).")
	flag.BoolVar(&s.leaderElect, "leader-elect", false, "Enable leader election (for more than one replica).")
	flag.BoolVar(&s.installCRDs, "install-crds", false, "Server-side apply opr8r's CRDs at start (for development).")
	flag.IntVar(&s.maxConcurrent, "max-concurrent-reconciles", 4, "TerraformRuns reconciled in parallel.")
	flag.Float64Var(&s.qps, "kube-api-qps", 50, "Client QPS towards the API server.")
	flag.IntVar(&s.burst, "kube-api-burst", 100, "Client burst towards the API server.")
	flag.DurationVar(&s.destroyTimeout, "destroy-timeout", controller.DefaultDestroyTimeout, "A deletion whose destroy runs longer is marked Stalled (DestroyTimeout); never before the destroy's own steps may end (spec.timeouts).")
	flag.IntVar(&s.maxActiveRuns, "max-active-runs", 100, "Engine children (runs and scheduled checks) active at once across the manager; more wait, runs people asked for before scheduled checks (0: no cap).")
	flag.IntVar(&s.maxActiveRunsPerNS, "max-active-runs-per-namespace", -1, "Engine children active at once in one namespace, its share of --max-active-runs, so that one namespace cannot take every slot (-1: a quarter of --max-active-runs, at least 1; 0: no share).")
	flag.DurationVar(&s.minCheckInterval, "min-check-interval", controller.DefaultMinCheckInterval, "The shortest spec.interval honoured; shorter intervals are raised to it.")
	flag.BoolVar(&s.admissionPolicies, "admission-policies", true, "opr8r's admission policies (config/policy) are installed, so the users they stamp on approvals and spec changes are trusted; false (a cluster without MutatingAdmissionPolicy): every decision counts as by an unknown user, and approval rules that need to know who decided cannot be met.")
	flag.BoolVar(&s.crossNSDeps, "allow-cross-namespace-dependencies", false, "Let spec.dependsOn name TerraformRuns in other namespaces (off by default: a TerraformRun could otherwise order itself after, and read the outputs of, another tenant's runs; their step pods still need RBAC to read those outputs).")
	flag.StringVar(&s.shard.Name, "shard", "", "Handle only the TerraformRuns labelled sharding.opr8r.io/key=NAME, with a leader election of this shard's own (empty: every run, unless --unsharded-only).")
	flag.BoolVar(&s.shard.UnshardedOnly, "unsharded-only", false, "Handle only the TerraformRuns without a sharding.opr8r.io/key label: the default manager of an install with --shard managers.")
	flag.StringVar(&s.sealKeySecret, "seal-key-secret", manager.DefaultSealKeySecret, "Secret, in the manager's own namespace (POD_NAMESPACE), holding the key the manager seals the children it drives itself with (the Job engine's); made at the first start when missing.")
	flag.DurationVar(&s.defaultApprovalTimeout, "default-approval-timeout", 7*24*time.Hour, "A plan waiting for approval longer is rejected when its TerraformRun sets no spec.approval.timeout (0: wait without limit).")
	flag.DurationVar(&s.progressTimeout, "progress-timeout", controller.DefaultProgressTimeout, "A run whose steps have not moved for this long (approval waits and running steps excluded) is marked Stalled (NoProgress); 0 disables it.")
	flag.StringVar(&s.objectStore.Endpoint, "records-object-store-endpoint", "", "host[:port] of an S3-compatible object store that keeps finished runs' records (step logs, plans), encrypted; empty: they stay in Secrets in the runs' namespaces (docs/records.md).")
	flag.StringVar(&s.objectStore.Bucket, "records-object-store-bucket", "", "The object store's bucket (it must exist).")
	flag.StringVar(&s.objectStore.Region, "records-object-store-region", "", "The bucket's region (default us-east-1).")
	flag.StringVar(&s.objectStore.Prefix, "records-object-store-prefix", "opr8r/", "The prefix of every object key.")
	flag.BoolVar(&s.objectStore.Insecure, "records-object-store-insecure", false, "Speak plain HTTP to the object store (a server inside the cluster).")
	flag.StringVar(&s.objectStoreCreds, "records-object-store-credentials-dir", "/etc/opr8r/records-object-store", "The mounted Secret with the object store's access-key, secret-key and encryption-key (32 bytes: openssl rand -base64 32).")
	flag.DurationVar(&s.recordsRetention, "records-retention", manager.DefaultRecordsRetention, "How long the object store keeps a record; records of runs that leave a TerraformRun's history, or of deleted TerraformRuns, go sooner.")
	opts := zap.Options{}
	flag.StringVar(&s.cfg.Providers.Mirror, "provider-mirror-url", "", "https URL of a provider network mirror (terraform's and OpenTofu's network_mirror protocol, as `terraform providers mirror` lays it out): every terraform step installs every provider from it and from nowhere else (empty: terraform's own installation).")
	flag.StringVar(&s.providerMirrorCA, "provider-mirror-ca-file", "", "PEM file of the CA that signed the provider mirror's certificate, trusted by terraform steps besides their image's roots.")
	flag.StringVar(&s.cfg.Providers.CacheClaim, "provider-cache-claim", "", "Name of a PersistentVolumeClaim, in each run's namespace, that keeps terraform's plugin cache across that namespace's runs; the manager makes it when missing (empty: each run fetches its providers into its own workspace). docs/performance.md, P10.")
	flag.StringVar(&s.cfg.Providers.CacheSize, "provider-cache-size", controller.DefaultProviderCacheSize, "Requested size of the provider cache claims the manager makes.")
	flag.StringVar(&s.cfg.Providers.CacheStorageClass, "provider-cache-storage-class", "", "StorageClass of the provider cache claims the manager makes (empty: the cluster's default); with several nodes, one whose volumes several nodes can mount (see --provider-cache-access-mode).")
	flag.StringVar(&s.cfg.Providers.CacheAccessMode, "provider-cache-access-mode", "ReadWriteOnce", "Access mode of the provider cache claims the manager makes: ReadWriteOnce (one node at a time: on several nodes, a step pod on another node waits until the pods that mount the claim end) or ReadWriteMany (a StorageClass whose volumes several nodes mount at once). docs/install.md.")
	flag.StringVar(&s.stateAPIAddr, "state-api-bind-address", ":9444", "Address of the state API, through which terraform steps reach their run's Secrets and Leases (the runner service accounts hold no right on them; docs/security.md); 0 disables it, and the steps then need those rights themselves.")
	flag.StringVar(&s.stateAPIURL, "state-api-url", "", "The state API's https URL as step pods reach it (the opr8r-state Service); empty: https://opr8r-state.<manager's namespace>.svc:<port> in a cluster, and no state API when the manager runs outside one.")
	flag.StringVar(&s.stateAPISecret, "state-api-tls-secret", "opr8r-state-tls", "Secret, in the manager's own namespace, holding the state API's self-signed certificate; made at the first start when missing.")
	flag.StringVar(&s.webhookAddr, "webhook-bind-address", ":9292", "Address of the webhook server that takes forges' push webhooks for TerraformRunReceivers (docs/pull-requests.md); 0 disables it. Expose it with the opr8r-webhook Service (an Ingress in front for the forge).")
	flag.Float64Var(&s.webhookRate, "webhook-rate", 1, "Webhook requests each receiver takes per second, on average (more are answered 429).")
	flag.IntVar(&s.webhookBurst, "webhook-burst", 10, "Webhook requests each receiver takes at once (requests that fail verification have a budget of their own of the same size).")
	flag.DurationVar(&s.webhookDeliveryTTL, "webhook-delivery-ttl", receiver.DefaultDeliveryTTL, "How long a receiver's status keeps a delivery it took (a redelivery or replay within it is answered duplicate); at most 100 are kept.")
	flag.DurationVar(&s.webhookTokenTTL, "webhook-token-ttl", receiver.DefaultTokenTTL, "How long the webhook server uses a receiver's token read from its Secret (a request that fails verification reads it again, at most once a second).")
	flag.BoolVar(&s.notifications, "notifications", true, "Send runs' happenings to the TerraformRunNotifiers of their namespaces (docs/notifications.md).")
	flag.IntVar(&s.notifyParallel, "notifications-parallel", notify.DefaultParallel, "Notification deliveries under way at once, in all.")
	flag.IntVar(&s.notifyPerNS, "notifications-per-namespace", notify.DefaultPerNamespace, "Notification deliveries under way at once for one namespace, so that a namespace whose destinations are slow or dead delays only its own.")
	flag.IntVar(&s.notifyQueue, "notifications-queue-size", notify.DefaultQueueSize, "Notices waiting per namespace; more are dropped, counted (opr8r_notifications_dropped_total) and shown on that namespace's notifiers.")
	flag.StringVar(&s.egress.podIPs, "egress-own-ips", "", "The manager pod's own addresses, comma-separated (the chart passes the downward API's status.podIPs), refused as destinations besides those found on the pod's interfaces.")
	flag.StringVar(&s.egress.serviceCIDRs, "egress-cluster-service-cidrs", egress.DefaultServiceCIDRs, "The cluster's Service ranges, refused as destinations of notifiers and preview reporters unless in --egress-allow-cidrs (default: common distributions' defaults).")
	flag.StringVar(&s.egress.podCIDRs, "egress-cluster-pod-cidrs", egress.DefaultPodCIDRs, "The cluster's pod ranges, refused as destinations unless in --egress-allow-cidrs (default: common distributions' and CNIs' defaults).")
	flag.StringVar(&s.egress.deny, "egress-deny-cidrs", "", "More ranges or addresses refused as destinations, comma-separated (your nodes', your VPC's, ...).")
	flag.StringVar(&s.egress.allow, "egress-allow-cidrs", "", "Ranges or addresses allowed despite the cluster's ranges and --egress-deny-cidrs (an in-cluster sink's Service IP); never loopback, link-local, metadata or the manager's own addresses.")
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")
	_, memMsg := manager.SetMemoryLimit("/sys/fs/cgroup", s.memoryLimitRatio)
	log.Info(memMsg)

	if err := run(s); err != nil {
		log.Error(err, "manager failed")
		os.Exit(1)
	}
}

func run(s settings) error {
	if err := s.complete(); err != nil {
		return err
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("no kubeconfig: %w", err)
	}
	restCfg.QPS, restCfg.Burst = float32(s.qps), s.burst
	var names []infrav1.EngineName
	for _, n := range strings.Split(s.engines, ",") {
		names = append(names, infrav1.EngineName(strings.TrimSpace(n)))
	}
	enabled, err := manager.SelectEngines(engines.All(), names)
	if err != nil {
		return err
	}
	scheme, err := engine.Scheme(enabled)
	if err != nil {
		return err
	}
	if s.defaultEngine == "" {
		s.defaultEngine = string(engine.DefaultEngine(enabled))
	}
	if s.defaultEngine == "auto" {
		if s.defaultEngine, err = servedEngine(restCfg, enabled); err != nil {
			return err
		}
		ctrl.Log.WithName("setup").Info("default engine chosen: the first enabled engine the cluster serves", "engine", s.defaultEngine)
	}
	fromImage, why, err := manager.StepBinaryFromImage(s.stepBinary, manager.ServerGitVersion(restCfg))
	if err != nil {
		return err
	}
	s.cfg.StepBinaryFromImage = fromImage
	ctrl.Log.WithName("setup").Info("terraform steps get opr8r-step", "from", map[bool]string{true: "the step image, as an image volume", false: "an init container"}[fromImage], "why", why)
	if s.installCRDs {
		if err := applyCRDs(restCfg); err != nil {
			return err
		}
	}
	var nsList []string
	if s.namespaces != "" {
		nsList = strings.Split(s.namespaces, ",")
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  manager.ShardCacheOptions(nsList, enabled, s.shard),
		Client:                 manager.ClientOptions(),
		Metrics:                s.metrics.ServerOptions(),
		HealthProbeBindAddress: s.probeAddr,
		PprofBindAddress:       s.pprofAddr,
		LeaderElection:         s.leaderElect,
		LeaderElectionID:       s.shard.LeaderElectionID(),
	})
	if err != nil {
		return err
	}
	if sh := s.shard.String(); sh != "" {
		ctrl.Log.WithName("setup").Info("handling one shard of the TerraformRuns", "shard", sh, "label", infrav1.ShardLabel)
	}
	controller.RegisterMetrics()
	queue.RegisterMetrics()
	objectStore, err := newObjectStore(s)
	if err != nil {
		return err
	}
	sealKey, err := loadSealKey(restCfg, scheme, s.sealKeySecret)
	if err != nil {
		return err
	}
	stateAPI, err := s.stateAPI(restCfg)
	if err != nil {
		return err
	}
	guard, err := s.egress.guard()
	if err != nil {
		return err
	}
	hc := guard.Client()
	if _, err := manager.Setup(mgr, manager.Options{
		Engines: enabled, DefaultEngine: infrav1.EngineName(s.defaultEngine), Engine: s.cfg,
		MaxConcurrentReconciles: s.maxConcurrent, DestroyTimeout: s.destroyTimeout, ProgressTimeout: s.progressTimeout,
		MaxActiveRuns: s.maxActiveRuns, MaxActiveRunsPerNamespace: s.maxActiveRunsPerNS, MinCheckInterval: s.minCheckInterval, NoAdmissionPolicies: !s.admissionPolicies,
		AllowCrossNamespaceDependencies: s.crossNSDeps, WatchNamespaces: nsList, Shard: s.shard,
		ObjectStore: objectStore, RecordsRetention: s.recordsRetention,
		SealKey: sealKey, DefaultApprovalTimeout: s.defaultApprovalTimeout,
		// The webhook server seals the previews it makes, and the preview
		// reporter reports only those, under the manager's seal key.
		Receiver: &receiver.Server{Addr: s.webhookAddr, Rate: rate.Limit(s.webhookRate), Burst: s.webhookBurst, HTTP: hc, Seals: engine.Seals{Key: sealKey},
			DeliveryTTL: s.webhookDeliveryTTL, TokenTTL: s.webhookTokenTTL},
		Notify:   notifier(s, hc),
		StateAPI: stateAPI,
	}); err != nil {
		return err
	}
	if err := mgr.Add(manager.MemoryReleaser{Interval: s.memoryRelease, MinFree: 16 << 20}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// complete checks the settings and fills in the defaults that depend on
// others.
func (s *settings) complete() error {
	if err := s.shard.Validate(); err != nil {
		return err
	}
	if s.maxActiveRunsPerNS < 0 {
		s.maxActiveRunsPerNS = queue.DefaultNamespaceShare(s.maxActiveRuns)
	}
	if s.notifyParallel < 1 || s.notifyPerNS < 1 || s.notifyQueue < 1 {
		return fmt.Errorf("--notifications-parallel, --notifications-per-namespace and --notifications-queue-size must be at least 1")
	}
	if err := s.completeProviders(); err != nil {
		return err
	}
	if !s.metrics.Secure && s.metrics.BindAddress != "0" {
		ctrl.Log.WithName("setup").Info("metrics are served over plain HTTP to anyone who reaches the port (--metrics-secure=false): for local development only", "address", s.metrics.BindAddress)
	}
	return nil
}

// completeProviders reads the provider mirror's CA and checks the
// provider settings, so a mistake stops the manager, not every run.
func (s *settings) completeProviders() error {
	p := &s.cfg.Providers
	if s.providerMirrorCA != "" {
		b, err := os.ReadFile(s.providerMirrorCA)
		if err != nil {
			return fmt.Errorf("--provider-mirror-ca-file: %w", err)
		}
		p.MirrorCA = string(b)
		if err := providers.CheckCA(p.MirrorCA); err != nil {
			return fmt.Errorf("--provider-mirror-ca-file %s: %w", s.providerMirrorCA, err)
		}
	}
	if p.Mirror != "" {
		u, err := providers.MirrorURL(p.Mirror)
		if err != nil {
			return fmt.Errorf("--provider-mirror-url: %w", err)
		}
		p.Mirror = u
	}
	if p.CacheClaim != "" {
		if errs := validation.IsDNS1123Subdomain(p.CacheClaim); len(errs) > 0 {
			return fmt.Errorf("--provider-cache-claim %q is not a PersistentVolumeClaim name: %s", p.CacheClaim, strings.Join(errs, "; "))
		}
		if _, err := controller.ProviderCacheClaim("", *p); err != nil {
			return err
		}
	}
	return nil
}

// loadSealKey reads (or makes) the seal key in the manager's namespace,
// before the manager's caches start.
func loadSealKey(cfg *rest.Config, scheme *runtime.Scheme, name string) ([]byte, error) {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return manager.LoadSealKey(ctx, c, manager.OwnNamespace("opr8r-system"), name)
}

// stateAPI makes or reads the state API's certificate, and tells the
// engines where the steps reach it; nil when it is off.
func (s *settings) stateAPI(cfg *rest.Config) (*stateapi.Server, error) {
	if s.stateAPIAddr == "" || s.stateAPIAddr == "0" {
		return nil, nil
	}
	ns := manager.OwnNamespace("opr8r-system")
	u := s.stateAPIURL
	if u == "" {
		if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
			ctrl.Log.WithName("setup").Info("no state API: the manager runs outside a cluster and --state-api-url is empty; the steps use their service account's own rights on Secrets and Leases")
			return nil, nil
		}
		_, port, err := net.SplitHostPort(s.stateAPIAddr)
		if err != nil {
			return nil, fmt.Errorf("--state-api-bind-address %q: %w", s.stateAPIAddr, err)
		}
		u = "https://opr8r-state." + ns + ".svc:" + port
	}
	parsed, err := url.Parse(u)
	if err != nil || parsed.Scheme != "https" || parsed.Hostname() == "" {
		return nil, fmt.Errorf("--state-api-url %q: an https URL", u)
	}
	host := parsed.Hostname()
	dns := []string{host}
	if short, ok := strings.CutSuffix(host, ".svc"); ok {
		dns = append(dns, short, host+".cluster.local")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cert, caPEM, err := stateapi.EnsureCertificate(ctx, cs, ns, s.stateAPISecret, dns, time.Now())
	if err != nil {
		return nil, err
	}
	s.cfg.StateAPI = engine.StateAPI{URL: u, CA: string(caPEM)}
	ctrl.Log.WithName("setup").Info("terraform steps reach their Secrets and Leases through the state API", "url", u)
	return &stateapi.Server{Addr: s.stateAPIAddr, TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}, nil
}

// newObjectStore connects to the records' object store when one is
// configured, and checks its bucket before the manager starts.
func newObjectStore(s settings) (*s3.Store, error) {
	if s.objectStore.Endpoint == "" {
		return nil, nil
	}
	cfg, err := manager.ObjectStoreConfig(s.objectStore, s.objectStoreCreds)
	if err != nil {
		return nil, err
	}
	st, err := s3.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.Check(ctx); err != nil {
		return nil, err
	}
	ctrl.Log.WithName("setup").Info("records of finished runs are kept in the object store", "endpoint", cfg.Endpoint, "bucket", cfg.Bucket, "retention", s.recordsRetention)
	return st, nil
}

// applyCRDs server-side applies the embedded CRDs.
func applyCRDs(restCfg *rest.Config) error {
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return err
	}
	c, err := client.New(restCfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	return fs.WalkDir(crd.Bases, "bases", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := crd.Bases.ReadFile(p)
		if err != nil {
			return err
		}
		obj := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(b, obj); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		obj.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		return c.Patch(context.Background(), obj, client.Apply, client.FieldOwner("opr8r"), client.ForceOwnership)
	})
}

func engineNames(es []engine.Engine) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = string(e.Name())
	}
	return out
}

// servedEngine returns the first of the engines whose child kind the
// cluster serves.
func servedEngine(cfg *rest.Config, engines []engine.Engine) (string, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return "", err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return "", err
	}
	for _, e := range engines {
		gvk := e.ChildGVK()
		if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
			return string(e.Name()), nil
		}
	}
	return "", fmt.Errorf("--default-engine=auto: the cluster serves the child kind of none of the enabled engines %v", engineNames(engines))
}

// notifier is the notifications' dispatcher, or nil when they are off.
func notifier(s settings, hc *http.Client) *notify.Dispatcher {
	if !s.notifications {
		return nil
	}
	return &notify.Dispatcher{HTTP: hc, Parallel: s.notifyParallel, PerNamespace: s.notifyPerNS, QueueSize: s.notifyQueue}
}

// guard is the egress guard of notifiers and preview reporters: the
// flags' ranges, and the pod's own addresses from the flag and from its
// interfaces.
func (e egressFlags) guard() (*egress.Guard, error) {
	g := &egress.Guard{Own: egress.InterfaceAddrs()}
	own, err := egress.ParseAddrs(e.podIPs)
	if err != nil {
		return nil, fmt.Errorf("--egress-own-ips: %w", err)
	}
	g.Own = append(g.Own, own...)
	for _, f := range []struct {
		name, value string
		into        *[]netip.Prefix
	}{
		{"--egress-cluster-service-cidrs", e.serviceCIDRs, &g.Service},
		{"--egress-cluster-pod-cidrs", e.podCIDRs, &g.Pods},
		{"--egress-deny-cidrs", e.deny, &g.Deny},
		{"--egress-allow-cidrs", e.allow, &g.Allow},
	} {
		if *f.into, err = egress.ParseCIDRs(f.value); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	ctrl.Log.WithName("setup").Info("egress guard", "ownAddresses", len(g.Own), "serviceCIDRs", e.serviceCIDRs, "podCIDRs", e.podCIDRs, "deny", e.deny, "allow", e.allow)
	return g, nil
}
