package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	yamlv3 "gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// TestDeployManifestsSchema decodes every manifest under deploy/kubernetes
// strictly into the Kubernetes API's own Go types (k8s.io/api), refusing
// unknown and duplicate fields and wrong types, as the API server would.
// This is the schema check, offline: kubeconform fetches its JSON schemas
// from GitHub at run time, which CI without network cannot.
func TestDeployManifestsSchema(t *testing.T) {
	types := map[string]func() any{
		"apps/v1 Deployment":                            func() any { return new(appsv1.Deployment) },
		"v1 Service":                                    func() any { return new(corev1.Service) },
		"v1 ConfigMap":                                  func() any { return new(corev1.ConfigMap) },
		"policy/v1 PodDisruptionBudget":                 func() any { return new(policyv1.PodDisruptionBudget) },
		"networking.k8s.io/v1 NetworkPolicy":            func() any { return new(networkingv1.NetworkPolicy) },
		"kustomize.config.k8s.io/v1beta1 Kustomization": nil, // kustomize's own file, checked in TestKubernetesManifests
	}
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests under %s: %v", manifestDir, err)
	}
	seen := map[string]bool{}
	var deps []*appsv1.Deployment
	var pols []*networkingv1.NetworkPolicy
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Split into documents with yaml.v3, then re-encode each one, so
		// that sigs.k8s.io/yaml sees a single document.
		dec := yamlv3.NewDecoder(bytes.NewReader(data))
		for i := 0; ; i++ {
			var doc yamlv3.Node
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			raw, err := yamlv3.Marshal(&doc)
			if err != nil {
				t.Fatal(err)
			}
			var tm struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(raw, &tm); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			key := tm.APIVersion + " " + tm.Kind
			mk, ok := types[key]
			if !ok {
				t.Errorf("%s document %d: %s is not a kind this test knows; add its k8s.io/api type", f, i, key)
				continue
			}
			seen[key] = true
			if mk == nil {
				continue
			}
			obj := mk()
			if err := yaml.UnmarshalStrict(raw, obj); err != nil {
				t.Errorf("%s document %d (%s): %v", filepath.Base(f), i, key, err)
			}
			switch o := obj.(type) {
			case *appsv1.Deployment:
				deps = append(deps, o)
			case *networkingv1.NetworkPolicy:
				pols = append(pols, o)
			}
		}
	}
	if len(deps) != 1 || len(pols) == 0 {
		t.Fatalf("want one Deployment and a NetworkPolicy, got %d and %d", len(deps), len(pols))
	}
	checkNetworkPolicy(t, deps[0], pols)
}

// checkNetworkPolicy checks that a policy selects batcherd's pods, denies
// ingress but from named callers, names only the container's ports, and
// lets no caller that may reach gRPC or HTTP reach the admin port.
func checkNetworkPolicy(t *testing.T, dep *appsv1.Deployment, pols []*networkingv1.NetworkPolicy) {
	t.Helper()
	ports := map[string]bool{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		ports[p.Name] = true
	}
	selects := false
	for _, np := range pols {
		if !subset(np.Spec.PodSelector.MatchLabels, dep.Spec.Template.Labels) {
			continue
		}
		selects = true
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			t.Errorf("NetworkPolicy %s: policyTypes %v lacks Ingress", np.Name, np.Spec.PolicyTypes)
		}
		for i, r := range np.Spec.Ingress {
			if len(r.From) == 0 || len(r.Ports) == 0 {
				t.Errorf("NetworkPolicy %s ingress %d: from and ports must be set (empty allows everyone or every port)", np.Name, i)
			}
			var admin, api bool
			for _, p := range r.Ports {
				if p.Port == nil || p.Port.StrVal == "" || !ports[p.Port.StrVal] {
					t.Errorf("NetworkPolicy %s ingress %d: port %v is not a named container port", np.Name, i, p.Port)
					continue
				}
				admin = admin || p.Port.StrVal == "admin"
				api = api || p.Port.StrVal != "admin"
			}
			if admin && api {
				t.Errorf("NetworkPolicy %s ingress %d: the admin port shares a rule with the API ports: callers would reach it", np.Name, i)
			}
		}
	}
	if !selects {
		t.Errorf("no NetworkPolicy selects the Deployment's pods %v", dep.Spec.Template.Labels)
	}
}
