// podres asks a kubelet's PodResources API (v1) what it allocated and prints
// it as JSON: the node tests' independent view of the kubelet, compared with
// what the agent publishes and what each pod's service reports. Adapted from
// ../shared/recipes/real-kubelet/podres-main.go.
//
//	podres SOCKET   -> {"list": ListPodResourcesResponse, "allocatable": AllocatableResourcesResponse}
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: podres SOCKET")
		os.Exit(2)
	}
	socket, err := filepath.Abs(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "podres:", err)
		os.Exit(1)
	}
	// "unix://" + a relative path would read its first element as the authority.
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "podres:", err)
		os.Exit(1)
	}
	defer conn.Close()
	client := podresv1.NewPodResourcesListerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := client.List(ctx, &podresv1.ListPodResourcesRequest{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "podres: List:", err)
		os.Exit(1)
	}
	allocatable, err := client.GetAllocatableResources(ctx, &podresv1.AllocatableResourcesRequest{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "podres: GetAllocatableResources:", err)
		os.Exit(1)
	}
	out, _ := json.Marshal(map[string]any{"list": list, "allocatable": allocatable})
	fmt.Println(string(out))
}
