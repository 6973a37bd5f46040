// kube-scheduler with the NodeResourceTopologyMatch plugin registered: what
// scheduler-plugins' own cmd/scheduler builds, less the plugins numaserve's
// scheduler profile does not use.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // REST client metrics, as kube-scheduler registers them
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme" // the plugin's args in KubeSchedulerConfiguration
	"sigs.k8s.io/scheduler-plugins/pkg/noderesourcetopology"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(noderesourcetopology.Name, noderesourcetopology.New))
	os.Exit(cli.Run(command))
}
