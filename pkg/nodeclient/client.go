// Package nodeclient is the node daemon's client of the Kubernetes API:
// its own Node and the pods bound to it, over a REST client whose scheme
// holds core/v1 only. The generated clientset registers every API group,
// which triples the daemon's binary, and a node agent's binary is
// resident memory on every GPU node.
package nodeclient

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Client reads and patches the core objects the node daemon uses.
type Client struct {
	rest rest.Interface
	// OnNode, if set, is given the node as each patch of it left it.
	OnNode func(*corev1.Node)
}

// New returns a Client for the API server in config.
func New(config *rest.Config) (*Client, error) {
	rc, err := restClient(config, "/api", corev1.SchemeGroupVersion, corev1.AddToScheme)
	if err != nil {
		return nil, fmt.Errorf("core/v1 client: %w", err)
	}
	return &Client{rest: rc}, nil
}

// restClient is a REST client for the API group version gv under
// apiPath, whose types add registers. It speaks protobuf, as the kubelet
// does: the apiserver encodes each object once per format its watchers
// ask, and protobuf costs it and the node daemon less than JSON.
func restClient(config *rest.Config, apiPath string, gv schema.GroupVersion, add func(*runtime.Scheme) error) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	if err := add(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(config)
	c.APIPath = apiPath
	c.GroupVersion = &gv
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// PatchNode applies a JSON merge patch to the named node and returns the
// node as the patch left it.
func (c *Client) PatchNode(ctx context.Context, name string, patch []byte) (*corev1.Node, error) {
	node := &corev1.Node{}
	if err := c.rest.Patch(types.MergePatchType).Resource("nodes").Name(name).Body(patch).Do(ctx).Into(node); err != nil {
		return nil, err
	}
	if c.OnNode != nil {
		c.OnNode(node)
	}
	return node, nil
}

// Node lists and watches the named node alone, for an informer. It needs
// list and watch on nodes: RBAC cannot narrow them to the node a daemon
// runs on.
func (c *Client) Node(name string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.rest, "nodes", metav1.NamespaceAll, fields.OneTermEqualSelector("metadata.name", name))
}

// GetPod reads one pod.
func (c *Client) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := c.rest.Get().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(pod)
	return pod, err
}

// PodsOn lists and watches the pods bound to node, for an informer.
func (c *Client) PodsOn(node string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.rest, "pods", metav1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node))
}
