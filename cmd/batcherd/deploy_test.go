package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/batcherhq/batcher/cmd/batcherd/internal/config"
)

// The Kubernetes manifests under deploy/kubernetes are checked here, beside
// the daemon whose settings they must agree with: the ConfigMap's file must
// load through config.Load, the probes must reach batcherd's gRPC health
// service, and the grace period must cover the whole shutdown.

const manifestDir = "../../deploy/kubernetes"

// k8sObject is the part of a Kubernetes object the checks read.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"` // ConfigMap
	Spec yaml.Node         `yaml:"spec"`

	file string
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type probe struct {
	GRPC *struct {
		Port    int    `yaml:"port"`
		Service string `yaml:"service"`
	} `yaml:"grpc"`
	HTTPGet *struct {
		Scheme string `yaml:"scheme"`
		Port   string `yaml:"port"`
		Path   string `yaml:"path"`
	} `yaml:"httpGet"`
	TCPSocket any `yaml:"tcpSocket"`
	Exec      any `yaml:"exec"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name     string `yaml:"name"`
			Key      string `yaml:"key"`
			Optional *bool  `yaml:"optional"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Env   []envVar `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	StartupProbe   *probe `yaml:"startupProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Lifecycle      struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type deploymentSpec struct {
	Replicas int           `yaml:"replicas"`
	Selector labelSelector `yaml:"selector"`
	Template struct {
		Metadata struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
			SecurityContext               struct {
				RunAsNonRoot *bool `yaml:"runAsNonRoot"`
				RunAsUser    int   `yaml:"runAsUser"`
			} `yaml:"securityContext"`
			Containers []container `yaml:"containers"`
			Volumes    []struct {
				Name      string `yaml:"name"`
				ConfigMap *struct {
					Name string `yaml:"name"`
				} `yaml:"configMap"`
				Secret *struct {
					SecretName string `yaml:"secretName"`
				} `yaml:"secret"`
			} `yaml:"volumes"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

type serviceSpec struct {
	ClusterIP string            `yaml:"clusterIP"`
	Selector  map[string]string `yaml:"selector"`
	Ports     []struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort any    `yaml:"targetPort"`
	} `yaml:"ports"`
}

type pdbSpec struct {
	MinAvailable   any           `yaml:"minAvailable"`
	MaxUnavailable any           `yaml:"maxUnavailable"`
	Selector       labelSelector `yaml:"selector"`
}

// loadManifests parses every YAML document under deploy/kubernetes.
func loadManifests(t *testing.T) []*k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests under %s: %v", manifestDir, err)
	}
	var objs []*k8sObject
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for i := 0; ; i++ {
			o := &k8sObject{file: filepath.Base(f)}
			if err := dec.Decode(o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if o.APIVersion == "" || o.Kind == "" {
				t.Fatalf("%s document %d: apiVersion and kind are required, got %q %q", f, i, o.APIVersion, o.Kind)
			}
			if o.Kind != "Kustomization" && o.Metadata.Name == "" {
				t.Fatalf("%s document %d (%s): metadata.name is required", f, i, o.Kind)
			}
			objs = append(objs, o)
		}
	}
	return objs
}

func byKind(t *testing.T, objs []*k8sObject, kind string) []*k8sObject {
	t.Helper()
	var out []*k8sObject
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s among the manifests", kind)
	}
	return out
}

func decodeSpec[T any](t *testing.T, o *k8sObject) *T {
	t.Helper()
	var s T
	if err := o.Spec.Decode(&s); err != nil {
		t.Fatalf("%s %s (%s): spec: %v", o.Kind, o.Metadata.Name, o.file, err)
	}
	return &s
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return n
}

// loadedConfig loads the ConfigMap's batcherd.yaml through config.Load, as
// batcherd in the pod would, with the Secret's variables set.
func loadedConfig(t *testing.T, objs []*k8sObject, dep *deploymentSpec) *config.Config {
	t.Helper()
	c := dep.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			env[e.Name] = "from-secret-" + strings.ToLower(e.Name) // placeholders
			if e.Name == "BATCHER_REDIS_URL" {
				env[e.Name] = "redis://redis.example:6379/0"
			}
			continue
		}
		env[e.Name] = e.Value
	}
	path := env[config.EnvConfig]
	if path == "" {
		t.Fatalf("container %s: %s is not set", c.Name, config.EnvConfig)
	}
	// The file is the ConfigMap's key of the same name, mounted at its
	// directory.
	var mountVolume string
	for _, m := range c.VolumeMounts {
		if m.MountPath == filepath.Dir(path) {
			mountVolume = m.Name
		}
	}
	var cmName string
	for _, v := range dep.Template.Spec.Volumes {
		if v.Name == mountVolume && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	if cmName == "" {
		t.Fatalf("%s=%s: no ConfigMap volume is mounted at %s", config.EnvConfig, path, filepath.Dir(path))
	}
	var data string
	for _, cm := range byKind(t, objs, "ConfigMap") {
		if cm.Metadata.Name == cmName {
			var ok bool
			if data, ok = cm.Data[filepath.Base(path)]; !ok {
				t.Fatalf("ConfigMap %s has no key %s", cmName, filepath.Base(path))
			}
		}
	}
	if data == "" {
		t.Fatalf("ConfigMap %s not found", cmName)
	}
	file := filepath.Join(t.TempDir(), "batcherd.yaml")
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	env[config.EnvConfig] = file
	cfg, err := config.Load(c.Args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
	if err != nil {
		t.Fatalf("the ConfigMap's batcherd.yaml does not load: %v", err)
	}
	return cfg
}

func TestKubernetesManifests(t *testing.T) {
	objs := loadManifests(t)

	deps := byKind(t, objs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("want one Deployment, got %d", len(deps))
	}
	dep := decodeSpec[deploymentSpec](t, deps[0])
	labels := dep.Template.Metadata.Labels
	if !subset(dep.Selector.MatchLabels, labels) {
		t.Fatalf("Deployment selector %v does not match its pod labels %v", dep.Selector.MatchLabels, labels)
	}
	if len(dep.Template.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(dep.Template.Spec.Containers))
	}
	c := dep.Template.Spec.Containers[0]
	cfg := loadedConfig(t, objs, dep)

	// Ports: batcherd's defaults, named, and the listeners bind beyond
	// loopback (the kubelet probes the pod IP).
	wantPorts := map[string]struct{ addr, def string }{
		"grpc":  {cfg.Listen, config.DefaultListen},
		"http":  {cfg.HTTP.Listen, config.DefaultHTTPListen},
		"admin": {cfg.Telemetry.AdminListen, config.DefaultAdminListen},
	}
	containerPorts := map[string]int{}
	for _, p := range c.Ports {
		containerPorts[p.Name] = p.ContainerPort
	}
	for name, w := range wantPorts {
		if got, want := port(t, w.addr), port(t, w.def); got != want {
			t.Errorf("%s listens on port %d, want batcherd's default %d", name, got, want)
		}
		if containerPorts[name] != port(t, w.def) {
			t.Errorf("containerPort %q = %d, want %d", name, containerPorts[name], port(t, w.def))
		}
		if host, _, _ := net.SplitHostPort(w.addr); host == "127.0.0.1" || host == "localhost" {
			t.Errorf("%s listens on loopback (%s): unreachable from the kubelet and Services", name, w.addr)
		}
	}
	// Probes: the admin listener's /healthz over HTTPS (the kubelet's grpc
	// probes cannot speak TLS); it turns 503 when the drain begins.
	probes := map[string]*probe{"startupProbe": c.StartupProbe, "readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe}
	for name, p := range probes {
		if name != "startupProbe" && p == nil {
			t.Errorf("%s missing", name)
			continue
		}
		if p == nil {
			continue
		}
		if p.HTTPGet == nil || p.GRPC != nil || p.TCPSocket != nil || p.Exec != nil {
			t.Errorf("%s must be an httpGet of the admin listener's /healthz only", name)
			continue
		}
		if g := p.HTTPGet; g.Scheme != "HTTPS" || g.Path != "/healthz" || (g.Port != "admin" && g.Port != strconv.Itoa(containerPorts["admin"])) {
			t.Errorf("%s: httpGet %+v, want scheme HTTPS, path /healthz, the admin port", name, *g)
		}
	}

	// Secure by default: TLS and authentication on every listener, their
	// files from Secrets mounted read-only, never --insecure.
	if cfg.Security.Insecure {
		t.Error("security.insecure is set: the default must be TLS and a tenants file")
	}
	secretMounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		for _, v := range dep.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				secretMounts[m.MountPath] = true
			}
		}
	}
	for field, path := range map[string]string{
		"security.tls.cert_file": cfg.Security.TLS.CertFile,
		"security.tls.key_file":  cfg.Security.TLS.KeyFile,
		"security.tenants_file":  cfg.Security.TenantsFile,
	} {
		if path == "" {
			t.Errorf("%s is not set", field)
		} else if !secretMounts[filepath.Dir(path)] {
			t.Errorf("%s = %s: not in a directory mounted from a Secret", field, path)
		}
	}

	// The grace period covers the preStop sleep, the drain and the
	// delivery budget, with room left before the SIGKILL.
	pre := c.Lifecycle.PreStop
	if pre == nil || pre.Sleep == nil || pre.Sleep.Seconds <= 0 {
		t.Fatal("preStop must sleep, so that endpoints drain before SIGTERM")
	}
	gp := dep.Template.Spec.TerminationGracePeriodSeconds
	if gp == nil {
		t.Fatal("terminationGracePeriodSeconds is not set (the default 30 s does not cover the drain)")
	}
	need := time.Duration(pre.Sleep.Seconds)*time.Second + cfg.DrainTimeout.D() + deliveryBudget
	if grace := time.Duration(*gp) * time.Second; grace <= need {
		t.Errorf("terminationGracePeriodSeconds %v must exceed preStop %ds + drain_timeout %v + delivery budget %v = %v",
			grace, pre.Sleep.Seconds, cfg.DrainTimeout, deliveryBudget, need)
	}

	// Secrets come from a Secret, never a literal.
	secretEnv := map[string]bool{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secretEnv[e.Name] = true
		}
		if e.Value != "" && regexp.MustCompile(`(?i)(redis|postgres)://|token|key`).MatchString(e.Name+" "+e.Value) {
			t.Errorf("env %s holds a literal; take it from a Secret", e.Name)
		}
	}
	if !secretEnv["BATCHER_REDIS_URL"] {
		t.Error("env BATCHER_REDIS_URL must come from a secretKeyRef")
	}

	// Resources and security context.
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" {
			t.Errorf("resources.requests.%s missing", r)
		}
	}
	if lim, soft := quantityBytes(t, c.Resources.Limits["memory"]), envValue(c.Env, "GOMEMLIMIT"); soft != "" && quantityBytes(t, soft) >= lim {
		t.Errorf("GOMEMLIMIT %s must be below the memory limit %s", soft, c.Resources.Limits["memory"])
	}
	psc := dep.Template.Spec.SecurityContext
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == 0 {
		t.Error("the pod must run as a non-root user (runAsNonRoot, runAsUser)")
	}
	sc := c.SecurityContext
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem must be true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation must be false")
	}
	if !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Error("capabilities must drop ALL")
	}

	// Services select the pods; their ports name the container's.
	var headless int
	for _, o := range byKind(t, objs, "Service") {
		s := decodeSpec[serviceSpec](t, o)
		if !subset(s.Selector, labels) {
			t.Errorf("Service %s selector %v does not match the pod labels %v", o.Metadata.Name, s.Selector, labels)
		}
		if s.ClusterIP == "None" {
			headless++
		}
		for _, p := range s.Ports {
			target, ok := p.TargetPort.(string)
			if !ok || containerPorts[target] == 0 {
				t.Errorf("Service %s port %s: targetPort %v names no container port", o.Metadata.Name, p.Name, p.TargetPort)
			} else if p.Port != containerPorts[target] {
				t.Errorf("Service %s port %s: %d, want the container's %d", o.Metadata.Name, p.Name, p.Port, containerPorts[target])
			}
		}
	}
	if headless != 1 {
		t.Errorf("want one headless Service (clusterIP: None) for client-side balancing, got %d", headless)
	}
	// Clients balancing over the headless Service re-resolve when a
	// connection gets a GOAWAY: without a maximum age they never see a
	// replica added after they connected.
	if cfg.Security.Limits.Keepalive.MaxConnectionAge <= 0 {
		t.Error("security.limits.keepalive.max_connection_age must be set, so that DNS-balancing clients find new replicas")
	}

	// The PodDisruptionBudget guards exactly the Deployment's pods.
	for _, o := range byKind(t, objs, "PodDisruptionBudget") {
		p := decodeSpec[pdbSpec](t, o)
		if !maps(p.Selector.MatchLabels, dep.Selector.MatchLabels) {
			t.Errorf("PodDisruptionBudget %s selector %v, want the Deployment's %v", o.Metadata.Name, p.Selector.MatchLabels, dep.Selector.MatchLabels)
		}
		if (p.MinAvailable == nil) == (p.MaxUnavailable == nil) {
			t.Errorf("PodDisruptionBudget %s: set one of minAvailable and maxUnavailable", o.Metadata.Name)
		}
	}

	// The kustomization lists every manifest.
	k := byKind(t, objs, "Kustomization")[0]
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	raw, err := os.ReadFile(filepath.Join(manifestDir, k.file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &kust); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, o := range objs {
		if o.Kind != "Kustomization" && !slices.Contains(files, o.file) {
			files = append(files, o.file)
		}
	}
	sort.Strings(files)
	sort.Strings(kust.Resources)
	if !slices.Equal(files, kust.Resources) {
		t.Errorf("kustomization resources %v, want every manifest %v", kust.Resources, files)
	}

	checkDockerfile(t, psc.RunAsUser)
}

// checkDockerfile checks the image the Deployment runs: a distroless or
// scratch final stage, the same non-root user, batcherd as entrypoint.
func checkDockerfile(t *testing.T, uid int) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var from, user, entry string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			from, user = f[1], "" // a new stage
		case "USER":
			user = f[1]
		case "ENTRYPOINT":
			entry = strings.Join(f[1:], " ")
		}
	}
	if !strings.Contains(from, "distroless") && from != "scratch" {
		t.Errorf("Dockerfile final stage FROM %s, want distroless or scratch", from)
	}
	if want := strconv.Itoa(uid); !strings.HasPrefix(user, want) {
		t.Errorf("Dockerfile USER %q, want the pod's runAsUser %s", user, want)
	}
	if !strings.Contains(entry, "/batcherd") {
		t.Errorf("Dockerfile ENTRYPOINT %s, want /batcherd", entry)
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	return subset(a, b)
}

func envValue(env []envVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// quantityBytes reads a memory quantity in the binary suffixes these
// manifests use: Kubernetes' Mi and Gi, and Go's MiB and GiB (GOMEMLIMIT).
func quantityBytes(t *testing.T, q string) int64 {
	t.Helper()
	for _, s := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"Gi", 1 << 30}, {"Mi", 1 << 20}} {
		if n, ok := strings.CutSuffix(q, s.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("quantity %q: %v", q, err)
			}
			return v * s.mult
		}
	}
	t.Fatalf("quantity %q: want Mi, Gi, MiB or GiB", q)
	return 0
}
