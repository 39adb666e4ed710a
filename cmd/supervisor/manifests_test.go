package main

import (
	"flag"
	"io"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/meshweaver/supervisor/edge"
)

// serviceMonitor is the part of the Prometheus Operator's
// monitoring.coreos.com/v1 ServiceMonitor the manifests use, decoded as
// strictly as the API types: a field it does not list is an error. (The
// operator's Go types are a module of their own, with a Kubernetes of
// their own; this keeps the graph to k8s.io/api.)
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// kustomization is the part of kustomize's Kustomization the manifests use.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name   string `json:"name"`
		NewTag string `json:"newTag"`
	} `json:"images"`
}

// manifests is one directory's objects, decoded strictly.
type manifests struct {
	namespaces   []corev1.Namespace
	secrets      map[string]corev1.Secret
	pvcs         map[string]corev1.PersistentVolumeClaim
	services     []corev1.Service
	statefulSets []appsv1.StatefulSet
	pdbs         []policyv1.PodDisruptionBudget
	policies     []networkingv1.NetworkPolicy
	monitors     []serviceMonitor
}

// decodeManifests reads every YAML document of every file of dir but the
// kustomization into its Kubernetes API type, by apiVersion and kind, with
// sigs.k8s.io/yaml's UnmarshalStrict: an unknown or misspelt field, a
// value of the wrong type or a duplicate key fails, as the API server's
// strict field validation would. It checks too that the kustomization
// lists exactly the directory's files.
func decodeManifests(t *testing.T, dir string) manifests {
	t.Helper()
	var k kustomization
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil || k.Kind != "Kustomization" || k.APIVersion != "kustomize.config.k8s.io/v1beta1" {
		t.Fatalf("kustomization.yaml: %v (%s %s)", err, k.APIVersion, k.Kind)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	var listed []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			listed = append(listed, filepath.Base(f))
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(k.Resources)), listed) {
		t.Errorf("kustomization.yaml lists %v, the folder holds %v", k.Resources, listed)
	}
	m := manifests{secrets: map[string]corev1.Secret{}, pvcs: map[string]corev1.PersistentVolumeClaim{}}
	for _, f := range k.Resources {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			where := f + " document " + strconv.Itoa(i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			strict := func(gv string, into any) {
				t.Helper()
				if tm.APIVersion != gv {
					t.Errorf("%s: %s is %s, want %s", where, tm.Kind, tm.APIVersion, gv)
				}
				if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
					t.Errorf("%s (%s): %v", where, tm.Kind, err)
				}
			}
			switch tm.Kind {
			case "Namespace":
				var o corev1.Namespace
				strict("v1", &o)
				m.namespaces = append(m.namespaces, o)
			case "Secret":
				var o corev1.Secret
				strict("v1", &o)
				m.secrets[o.Name] = o
			case "PersistentVolumeClaim":
				var o corev1.PersistentVolumeClaim
				strict("v1", &o)
				m.pvcs[o.Name] = o
			case "Service":
				var o corev1.Service
				strict("v1", &o)
				m.services = append(m.services, o)
			case "StatefulSet":
				var o appsv1.StatefulSet
				strict("apps/v1", &o)
				m.statefulSets = append(m.statefulSets, o)
			case "PodDisruptionBudget":
				var o policyv1.PodDisruptionBudget
				strict("policy/v1", &o)
				m.pdbs = append(m.pdbs, o)
			case "NetworkPolicy":
				var o networkingv1.NetworkPolicy
				strict("networking.k8s.io/v1", &o)
				m.policies = append(m.policies, o)
			case "ServiceMonitor":
				var o serviceMonitor
				strict("monitoring.coreos.com/v1", &o)
				m.monitors = append(m.monitors, o)
			default:
				t.Errorf("%s: kind %q (%s) is not one the test knows", where, tm.Kind, tm.APIVersion)
			}
		}
	}
	if len(m.statefulSets) != 1 || len(m.services) != 1 || len(m.pdbs) != 1 || len(m.policies) != 1 || len(m.monitors) != 1 || len(m.namespaces) != 1 {
		t.Fatalf("%s: %d StatefulSets, %d Services, %d PDBs, %d NetworkPolicies, %d ServiceMonitors, %d Namespaces; want one each",
			dir, len(m.statefulSets), len(m.services), len(m.pdbs), len(m.policies), len(m.monitors), len(m.namespaces))
	}
	if m.namespaces[0].Name != k.Namespace {
		t.Errorf("the Namespace is %s, the kustomization's %s", m.namespaces[0].Name, k.Namespace)
	}
	return m
}

// TestManifests decodes deploy/kubernetes/single and .../cluster strictly
// into the Kubernetes API types and checks that they fit together and fit
// the daemon: the container's args (with the image's ENV under them) are
// serve flags serve reads without a problem; the probes ask /healthz and
// /readyz on the port of --metrics-listen, which is not on loopback (the
// kubelet dials the pod's IP); --listen is the pod's IP from the downward
// API; the homes and workspace mounts are --homes and --workspace, the
// homes' claim ReadWriteMany for a cluster; every TLS and authz file is a
// key of a mounted Secret, whose values are placeholders (the authz one a
// valid policy); the grace period outlasts --stop-timeout; the Service,
// PodDisruptionBudget, NetworkPolicy and ServiceMonitor select the pods and
// name their ports; and the cluster's members take their id from the pod's
// name and use the etcd the systemd files define.
func TestManifests(t *testing.T) {
	imageEnv := dockerfileEnv(t)
	for _, topo := range []string{"single", "cluster"} {
		t.Run(topo, func(t *testing.T) {
			m := decodeManifests(t, "../../deploy/kubernetes/"+topo)
			sts := m.statefulSets[0]
			pod := sts.Spec.Template
			sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
			if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
				t.Fatalf("the StatefulSet's selector %v does not match its pods' labels %v (%v)", sts.Spec.Selector, pod.Labels, err)
			}
			if len(pod.Spec.Containers) != 1 {
				t.Fatalf("%d containers, want the daemon's", len(pod.Spec.Containers))
			}
			c := pod.Spec.Containers[0]
			get, env := resolveContainerSettings(t, c, imageEnv)

			// The listener peers dial: the pod's IP.
			if host, port, err := net.SplitHostPort(get("listen")); err != nil || host != "10.244.0.7" || port == "" {
				t.Errorf("--listen %q: want $(POD_IP):PORT", get("listen"))
			}
			if f := env["POD_IP"].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "status.podIP" {
				t.Errorf("POD_IP is not the pod's IP from the downward API: %+v", env["POD_IP"])
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			_, listenPort, _ := net.SplitHostPort(get("listen"))
			_, mport, err := net.SplitHostPort(get("metrics-listen"))
			if err != nil || isLoopback(get("metrics-listen")) {
				t.Errorf("--metrics-listen %q: the kubelet and Prometheus reach the pod's IP, not its loopback", get("metrics-listen"))
			}
			if !slices.Contains(slices.Collect(maps.Values(ports)), atoi32(t, listenPort)) || !slices.Contains(slices.Collect(maps.Values(ports)), atoi32(t, mport)) {
				t.Errorf("container ports %v lack --listen's %s or --metrics-listen's %s", ports, listenPort, mport)
			}
			for _, pr := range []struct {
				name  string
				probe *corev1.Probe
				path  string
			}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/healthz"}} {
				if pr.probe == nil || pr.probe.HTTPGet == nil {
					t.Errorf("no %s probe over HTTP", pr.name)
					continue
				}
				h := pr.probe.HTTPGet
				port := h.Port.IntVal
				if h.Port.StrVal != "" {
					port = ports[h.Port.StrVal]
				}
				if h.Path != pr.path || strconv.Itoa(int(port)) != mport {
					t.Errorf("%s probe GET %s on port %v (%d), want %s on --metrics-listen's port %s", pr.name, h.Path, h.Port.String(), port, pr.path, mport)
				}
			}

			// Volumes: the homes and the workspace where serve looks for
			// them; every file flag a key of a mounted Secret.
			vols := map[string]corev1.Volume{}
			for _, v := range pod.Spec.Volumes {
				vols[v.Name] = v
			}
			mountOf := func(p string) (corev1.VolumeMount, bool) {
				for _, vm := range c.VolumeMounts {
					if vm.MountPath == p || strings.HasPrefix(p, vm.MountPath+"/") {
						return vm, true
					}
				}
				return corev1.VolumeMount{}, false
			}
			homes, ok := mountOf(get("homes"))
			if !ok || homes.MountPath != get("homes") || homes.ReadOnly || vols[homes.Name].PersistentVolumeClaim == nil {
				t.Errorf("--homes %s is not a writable mount of a claim (%+v)", get("homes"), homes)
			} else {
				claim, ok := m.pvcs[vols[homes.Name].PersistentVolumeClaim.ClaimName]
				want := corev1.ReadWriteOnce
				if topo == "cluster" {
					want = corev1.ReadWriteMany // every member mounts the one volume
				}
				if !ok || !slices.Contains(claim.Spec.AccessModes, want) {
					t.Errorf("the homes' claim %+v: want it shipped, %s", vols[homes.Name].PersistentVolumeClaim, want)
				}
			}
			if ws, ok := mountOf(get("workspace")); !ok || ws.MountPath != get("workspace") || !ws.ReadOnly {
				t.Errorf("--workspace %s is not a read-only mount", get("workspace"))
			}
			fileFlags := []string{"tls-cert", "tls-key", "tls-ca", "authz"}
			if topo == "cluster" {
				fileFlags = append(fileFlags, "etcd-tls-cert", "etcd-tls-key", "etcd-tls-ca")
			}
			secretOf := map[string]string{}
			for _, f := range fileFlags {
				p := get(f)
				vm, ok := mountOf(p)
				if !ok || !vm.ReadOnly || vols[vm.Name].Secret == nil {
					t.Errorf("--%s %s is on no read-only Secret mount", f, p)
					continue
				}
				name := vols[vm.Name].Secret.SecretName
				s, ok := m.secrets[name]
				key := strings.TrimPrefix(p, vm.MountPath+"/")
				if _, has := s.StringData[key]; !ok || !has {
					t.Errorf("--%s %s: Secret %s (shipped: %v) has no key %s", f, p, name, ok, key)
				}
				secretOf[f] = name
			}
			for name, s := range m.secrets {
				if len(s.Data) > 0 {
					t.Errorf("Secret %s ships data: placeholders go in stringData", name)
				}
				for k, v := range s.StringData {
					switch {
					case strings.Contains(v, "-----BEGIN"):
						t.Errorf("Secret %s key %s holds PEM material: ship placeholders only", name, k)
					case k == "authz.json":
						if _, err := edge.ParsePolicy([]byte(v)); err != nil {
							t.Errorf("Secret %s authz.json: %v", name, err)
						}
					case !strings.HasPrefix(v, "REPLACE"):
						t.Errorf("Secret %s key %s = %q: not a REPLACE placeholder", name, k, v)
					}
				}
			}
			stop, _ := time.ParseDuration(get("stop-timeout"))
			if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= stop {
				t.Errorf("terminationGracePeriodSeconds %v does not outlast --stop-timeout %v", g, stop)
			}
			if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("the container may escalate or keeps capabilities: %+v", c.SecurityContext)
			}
			if psc := pod.Spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
				t.Error("the pod may run as root")
			}

			// What selects the pods, and the ports it names.
			svc := m.services[0]
			if sts.Spec.ServiceName != svc.Name || svc.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Errorf("the StatefulSet's serviceName %s, the Service %s (clusterIP %q): want its headless Service", sts.Spec.ServiceName, svc.Name, svc.Spec.ClusterIP)
			}
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				t.Errorf("the Service's selector %v does not match the pods", svc.Spec.Selector)
			}
			svcPorts := map[string]bool{}
			for _, p := range svc.Spec.Ports {
				svcPorts[p.Name] = true
				if p.TargetPort.StrVal != "" && ports[p.TargetPort.StrVal] == 0 {
					t.Errorf("Service port %s targets %s, no container port", p.Name, p.TargetPort.StrVal)
				}
			}
			pdb := m.pdbs[0]
			if s, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !s.Matches(labels.Set(pod.Labels)) {
				t.Errorf("the PodDisruptionBudget selects %v, not the pods", pdb.Spec.Selector)
			}
			if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() < 1 {
				t.Errorf("the PodDisruptionBudget allows no disruption (%v): a node drain would never end", pdb.Spec.MaxUnavailable)
			}
			np := m.policies[0]
			if s, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || !s.Matches(labels.Set(pod.Labels)) {
				t.Errorf("the NetworkPolicy applies to %v, not the pods", np.Spec.PodSelector)
			}
			in := map[string]bool{}
			for _, r := range np.Spec.Ingress {
				for _, p := range r.Ports {
					in[p.Port.String()] = true
				}
			}
			if !in[listenPort] || !in[mport] {
				t.Errorf("the NetworkPolicy lets in ports %v, want --listen's %s and --metrics-listen's %s", in, listenPort, mport)
			}
			sm := m.monitors[0]
			if s, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector); err != nil || !s.Matches(labels.Set(svc.Labels)) {
				t.Errorf("the ServiceMonitor selects %v, not the Service's labels %v", sm.Spec.Selector, svc.Labels)
			}
			if len(sm.Spec.Endpoints) != 1 || !svcPorts[sm.Spec.Endpoints[0].Port] || sm.Spec.Endpoints[0].Path != "/metrics" ||
				strconv.Itoa(int(ports[sm.Spec.Endpoints[0].Port])) != mport {
				t.Errorf("the ServiceMonitor scrapes %+v, want /metrics on the Service's port of --metrics-listen", sm.Spec.Endpoints)
			}

			replicas := int32(1)
			if sts.Spec.Replicas != nil {
				replicas = *sts.Spec.Replicas
			}
			if topo == "single" {
				if replicas != 1 || get("cluster") != "" {
					t.Errorf("one node: %d replicas, --cluster %q", replicas, get("cluster"))
				}
				return
			}
			if replicas != 3 || get("cluster") == "" || get("etcd-name") != "" {
				t.Errorf("the cluster: %d replicas, --cluster %q, --etcd-name %q: want 3 members on an external etcd", replicas, get("cluster"), get("etcd-name"))
			}
			if f := env["SUPERVISOR_MEMBER"].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("SUPERVISOR_MEMBER is not the pod's stable name: %+v", env["SUPERVISOR_MEMBER"])
			}
			if secretOf["etcd-tls-ca"] == secretOf["tls-ca"] || get("etcd-tls-ca") == get("tls-ca") {
				t.Errorf("etcd's CA (%s) is the callers' (%s): etcd needs a CA of its own", secretOf["etcd-tls-ca"], secretOf["tls-ca"])
			}
			var advertised []string
			files, _ := filepath.Glob("../../deploy/systemd/cluster/etcd/*.env")
			for _, f := range files {
				advertised = append(advertised, readEnvFile(t, f)["ETCD_ADVERTISE_CLIENT_URLS"])
			}
			endpoints := strings.Split(get("etcd-endpoints"), ",")
			if len(advertised) != 3 || !slices.Equal(slices.Sorted(slices.Values(advertised)), slices.Sorted(slices.Values(endpoints))) {
				t.Errorf("--etcd-endpoints %v, the etcd members advertise %v", endpoints, advertised)
			}
			if a := pod.Spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
				t.Error("the members may share a node")
			}
		})
	}
}

// resolveContainerSettings reads the container's args and SUPERVISOR_
// variables, over the image's ENV, as serve does, Kubernetes' $(VAR)
// expansion done first (POD_IP as 10.244.0.7). It fails on any problem
// serve's reading reports, and on a $(VAR) the container does not define
// before its use.
func resolveContainerSettings(t *testing.T, c corev1.Container, imageEnv map[string]string) (get func(string) string, env map[string]corev1.EnvVar) {
	t.Helper()
	env = map[string]corev1.EnvVar{}
	vars := map[string]string{}
	for k, v := range imageEnv {
		vars[k] = v
	}
	for _, e := range c.Env {
		env[e.Name] = e
		switch {
		case e.Name == "POD_IP":
			vars[e.Name] = "10.244.0.7"
		case e.ValueFrom != nil:
			vars[e.Name] = "supervisor-0"
		default:
			vars[e.Name] = e.Value
		}
	}
	if len(c.Command) > 0 {
		t.Errorf("command %v overrides the image's entry point (tini -- supervisor serve)", c.Command)
	}
	var args []string
	for _, a := range c.Args {
		args = append(args, regexp.MustCompile(`\$\((\w+)\)`).ReplaceAllStringFunc(a, func(ref string) string {
			name := ref[2 : len(ref)-1]
			if _, ok := env[name]; !ok {
				t.Errorf("arg %q refers to $(%s), which the container does not define", a, name)
			}
			return vars[name]
		}))
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := serveFlags(fs)
	src, errs, err := readServeSettings(fs, o, args, func(k string) (string, bool) {
		if !strings.HasPrefix(k, "SUPERVISOR_") {
			return "", false
		}
		v, ok := vars[k]
		return v, ok
	})
	if err != nil || len(errs) > 0 {
		t.Fatalf("serve reads the container's settings with problems: %v %v", err, errs)
	}
	for _, e := range c.Env {
		if name, ok := strings.CutPrefix(e.Name, "SUPERVISOR_"); ok {
			if _, set := src[strings.ToLower(strings.ReplaceAll(name, "_", "-"))]; !set {
				t.Errorf("env %s sets no serve flag", e.Name)
			}
		}
	}
	return func(name string) string { return fs.Lookup(name).Value.String() }, env
}

// dockerfileEnv is the runtime image's SUPERVISOR_ variables (its last
// stage's ENV), the defaults under the manifests' settings.
func dockerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	s = s[strings.LastIndex(s, "\nFROM "):]
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`\b(SUPERVISOR_[A-Z_]+)=(\S+)`).FindAllStringSubmatch(s, -1) {
		out[m[1]] = m[2]
	}
	if out["SUPERVISOR_HOMES"] == "" || path.Clean(out["SUPERVISOR_HOMES"]) != out["SUPERVISOR_HOMES"] {
		t.Fatalf("the image's SUPERVISOR_HOMES is %q", out["SUPERVISOR_HOMES"])
	}
	return out
}

func atoi32(t *testing.T, s string) int32 {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Errorf("port %q: %v", s, err)
	}
	return int32(n)
}
