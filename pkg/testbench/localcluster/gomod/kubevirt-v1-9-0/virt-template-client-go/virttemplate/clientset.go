// Package virttemplate is the client of the virt-template API group that KubeVirt v1.9.0's
// virt-controller asks for (see ../go.mod: a stand-in, not the published module).
package virttemplate

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"kubevirt.io/virt-template-api/core/v1beta1"
)

// Clientset reaches the template.kubevirt.io/v1beta1 API.
type Clientset struct {
	v1beta1 *TemplateV1beta1Client
}

// TemplateV1beta1Client is the REST client of template.kubevirt.io/v1beta1.
type TemplateV1beta1Client struct {
	restClient rest.Interface
}

// RESTClient is the client informers list and watch through.
func (c *TemplateV1beta1Client) RESTClient() rest.Interface {
	return c.restClient
}

// TemplateV1beta1 returns the client of the v1beta1 version.
func (c *Clientset) TemplateV1beta1() *TemplateV1beta1Client {
	return c.v1beta1
}

// NewForConfig builds a Clientset from a copy of config, decoding VirtualMachineTemplates.
func NewForConfig(config *rest.Config) (*Clientset, error) {
	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(v1beta1.GroupVersion, &v1beta1.VirtualMachineTemplate{})
	cfg := rest.CopyConfig(config)
	cfg.GroupVersion = &v1beta1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &Clientset{v1beta1: &TemplateV1beta1Client{restClient: client}}, nil
}
