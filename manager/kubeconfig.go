package manager

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// LoadRESTConfig finds the cluster to talk to, as kubectl and client-go's users
// expect: the kubeconfig file at path if it is not empty, else the files that
// $KUBECONFIG lists, else ~/.kube/config if it exists, else the in-cluster
// configuration of a pod's service account. The error says which were tried.
func LoadRESTConfig(path string) (*rest.Config, error) {
	var rules *clientcmd.ClientConfigLoadingRules
	switch env := os.Getenv("KUBECONFIG"); {
	case path != "":
		rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	case env != "":
		path = env
		rules = &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(env)}
	default:
		if home, err := os.UserHomeDir(); err == nil {
			p := filepath.Join(home, ".kube", "config")
			if _, err := os.Stat(p); err == nil {
				path = p
				rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: p}
			}
		}
	}
	if rules == nil {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("manager: no kubeconfig (a path, $KUBECONFIG or ~/.kube/config) and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("manager: kubeconfig %s: %w", path, err)
	}
	if cfg == nil {
		return nil, errors.New("manager: kubeconfig " + path + ": no configuration")
	}
	return cfg, nil
}
