// Command crdgen prints the CustomResourceDefinitions that virt-operator would install for the
// kubevirt.io/kubevirt version this module requires, as one YAML stream on stdout.
//
// The local cluster installs them instead of hand-written CRDs when it runs KubeVirt's own
// virt-controller, so the schemas (and the absence of a status subresource on
// VirtualMachineInstances) are exactly those of that release. This folder is shared: the build
// copies it into each kubevirt-* wrapper module's crdgen/, beside the module's version.go, which
// lists the CRDs that version adds to those of every supported version (generators.go).
package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// generate runs every generator and returns the CRDs sorted by name, so the output is stable.
func generate() ([]*extv1.CustomResourceDefinition, error) {
	crds := make([]*extv1.CustomResourceDefinition, 0, len(generators))
	for _, newCRD := range generators {
		crd, err := newCRD()
		if err != nil {
			return nil, err
		}
		crds = append(crds, crd)
	}
	sort.Slice(crds, func(i, j int) bool { return crds[i].Name < crds[j].Name })
	return crds, nil
}

// manifest turns one CRD into the YAML a client posts: without the empty status and the null
// creationTimestamp that marshalling a Go object adds.
func manifest(crd *extv1.CustomResourceDefinition) ([]byte, error) {
	encoded, err := yaml.Marshal(crd)
	if err != nil {
		return nil, err
	}
	var fields map[string]interface{}
	if err := yaml.Unmarshal(encoded, &fields); err != nil {
		return nil, err
	}
	delete(fields, "status")
	if metadata, ok := fields["metadata"].(map[string]interface{}); ok {
		delete(metadata, "creationTimestamp")
	}
	return yaml.Marshal(fields)
}

func run() error {
	crds, err := generate()
	if err != nil {
		return fmt.Errorf("generating CRDs: %w", err)
	}
	out := bufio.NewWriter(os.Stdout)
	for _, crd := range crds {
		document, err := manifest(crd)
		if err != nil {
			return fmt.Errorf("encoding CRD %s: %w", crd.Name, err)
		}
		fmt.Fprintf(out, "---\n%s", document)
	}
	return out.Flush()
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "crdgen:", err)
		os.Exit(1)
	}
}
