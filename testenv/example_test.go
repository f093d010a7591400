package testenv_test

import (
	"context"
	"fmt"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/testenv"
)

// Start a control plane, write through the admin client, and inject a fault. Compiled, not
// run: it needs the etcd and kube-apiserver binaries
// (go run github.com/ctrlkit/ctrlkit/testenv/cmd/controlplane builds them).
func ExampleStart() {
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Config{})
	if err != nil {
		fmt.Println(err) // names the command that builds the binaries when they are missing
		return
	}
	defer env.Stop()

	client := kubernetes.NewForConfigOrDie(env.Config())
	_, err = client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
	}, metav1.CreateOptions{})
	fmt.Println(err)

	// Kill the API server and bring it back on the same port; clients reconnect.
	_ = env.RestartAPIServer(ctx, syscall.SIGKILL)
	// Compact etcd: watches from older resource versions now get 410 Gone.
	_, _ = env.Compact(ctx)
}
