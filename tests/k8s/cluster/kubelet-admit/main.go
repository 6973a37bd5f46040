// kubelet-admit: the kubelet's own admission of the pods kube-scheduler bound,
// node by node, with the kubelet's own code: the Topology Manager
// (single-numa-node, pod scope) with the static CPU Manager (full-pcpus-only
// under SMT) and the Static Memory Manager as its hint providers, wired as
// pkg/kubelet/cm/container_manager_linux.go wires them, and Admit() called
// for each pod in the order it was created, as the kubelet admits pods.
//
// Input (stdin): `kubectl get nodes,noderesourcetopologies,pods -o json`.
// Each node's machine is built from its NodeResourceTopology, as the agent
// published it: per zone, capacity CPUs as whole cores of the node's
// numaserve.io/threads-per-core threads, the first (capacity - allocatable)
// of them reserved (reservedSystemCPUs), and its memory capacity with
// (capacity - allocatable) reserved on that NUMA node (reservedMemory).
// Output (stdout): JSON, per node: pods admitted and refused (with the
// kubelet's reason), allocatable CPUs, CPUs assigned and left idle.
//
// What it does not model: devices and DRA (no pod here asks for any),
// hugepages, pods that are not Guaranteed (they take no exclusive CPUs or
// memory and are always admitted by these managers), a pod ending (nothing
// is freed), and the kubelet's other admission handlers (eviction, node
// resources, the pod's OS and node selectors: kube-scheduler checked those).
//
// It stays for the machines no real kubelet here can be: the fixture fleet's
// 2-socket nodes of 56 to 96 CPUs. A real kubelet with these managers runs
// in the node tests (tests/k8s/node): on a VM of two NUMA nodes it refuses
// the pod no node can hold (TopologyAffinityError), admits the chart's
// replicas one per NUMA node, frees a deleted pod's CPUs and memory, and its
// PodResources agree with the agent's NodeResourceTopology.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	cadvisorapi "github.com/google/cadvisor/info/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/utils/cpuset"
)

type object struct {
	Kind string `json:"kind"`
}

type zoneResource struct {
	Name        string            `json:"name"`
	Capacity    resource.Quantity `json:"capacity"`
	Allocatable resource.Quantity `json:"allocatable"`
}

type nrt struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Zones []struct {
		Name      string         `json:"name"`
		Type      string         `json:"type"`
		Resources []zoneResource `json:"resources"`
	} `json:"zones"`
}

type nodeReport struct {
	Node        string            `json:"node"`
	Admitted    []string          `json:"admitted"`
	Refused     map[string]string `json:"refused"` // pod -> reason: message
	Allocatable int64             `json:"allocatable_cpus"`
	Assigned    int64             `json:"assigned_cpus"`
	Idle        int64             `json:"idle_cpus"`
	Error       string            `json:"error,omitempty"`
}

// The kubelet's collaborators the managers call but these checks do not need.
type sourcesNotReady struct{}

func (sourcesNotReady) AddSource(string) {}
func (sourcesNotReady) AllReady() bool   { return false } // no stale-state sweeps: nothing ends here

type noStatus struct{}

func (noStatus) GetPodStatus(types.UID) (v1.PodStatus, bool) { return v1.PodStatus{}, false }

type noRuntime struct{}

func (noRuntime) UpdateContainerResources(context.Context, string, *runtimeapi.ContainerResources) error {
	return nil
}

func noPods() []*v1.Pod { return nil }

func zoneID(name string) (int, error) {
	return strconv.Atoi(strings.TrimPrefix(name, "node-"))
}

// The machine the NodeResourceTopology describes, and what its kubelet reserves.
func machineOf(topo nrt, threadsPerCore int) (*cadvisorapi.MachineInfo, cpuset.CPUSet, v1.ResourceList,
	[]kubeletconfig.MemoryReservation, int64, error) {
	info := &cadvisorapi.MachineInfo{}
	var reservedCPUs []int
	var reservedMemory []kubeletconfig.MemoryReservation
	var allocatable int64
	memoryReserved := resource.NewQuantity(0, resource.BinarySI)
	next := 0
	for _, z := range topo.Zones {
		if z.Type != "Node" {
			continue
		}
		id, err := zoneID(z.Name)
		if err != nil {
			return nil, cpuset.New(), nil, nil, 0, fmt.Errorf("zone %q: not node-<id>", z.Name)
		}
		var cpus, allocCPUs int64
		var memory, allocMemory resource.Quantity
		for _, r := range z.Resources {
			switch r.Name {
			case "cpu":
				cpus, allocCPUs = r.Capacity.Value(), r.Allocatable.Value()
			case "memory":
				memory, allocMemory = r.Capacity, r.Allocatable
			}
		}
		node := cadvisorapi.Node{Id: id, Memory: uint64(memory.Value())}
		for c := int64(0); c < cpus/int64(threadsPerCore); c++ {
			core := cadvisorapi.Core{Id: next, SocketID: id}
			for t := 0; t < threadsPerCore; t++ {
				core.Threads = append(core.Threads, next)
				if c*int64(threadsPerCore)+int64(t) < cpus-allocCPUs {
					reservedCPUs = append(reservedCPUs, next)
				}
				next++
			}
			node.Cores = append(node.Cores, core)
		}
		info.Topology = append(info.Topology, node)
		info.NumCores += int(cpus)
		info.NumPhysicalCores += len(node.Cores)
		info.NumSockets++
		info.MemoryCapacity += uint64(memory.Value())
		allocatable += allocCPUs
		held := memory.DeepCopy()
		held.Sub(allocMemory)
		memoryReserved.Add(held)
		reservedMemory = append(reservedMemory, kubeletconfig.MemoryReservation{
			NumaNode: int32(id), Limits: v1.ResourceList{v1.ResourceMemory: held}})
	}
	sort.Slice(info.Topology, func(i, j int) bool { return info.Topology[i].Id < info.Topology[j].Id })
	reservation := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(len(reservedCPUs)), resource.DecimalSI),
		v1.ResourceMemory: *memoryReserved,
	}
	return info, cpuset.New(reservedCPUs...), reservation, reservedMemory, allocatable, nil
}

func newReport(node string) nodeReport {
	return nodeReport{Node: node, Admitted: []string{}, Refused: map[string]string{}}
}

// exclusiveCPUs: what the static policy would pin for the pod (0: none, it
// runs on the shared pool and none of these managers can refuse it).
func exclusiveCPUs(pod *v1.Pod) int64 {
	var n int64
	for _, c := range pod.Spec.Containers {
		req, lim := c.Resources.Requests[v1.ResourceCPU], c.Resources.Limits[v1.ResourceCPU]
		if req.IsZero() || req.Cmp(lim) != 0 || req.MilliValue()%1000 != 0 {
			return 0
		}
		n += req.Value()
	}
	return n
}

// A node without a NodeResourceTopology: its machine is unknown, so only
// pods that need no exclusive CPUs are taken as admitted.
func unknownMachine(node string, pods []*v1.Pod) nodeReport {
	report := newReport(node)
	for _, p := range pods {
		if exclusiveCPUs(p) > 0 {
			report.Refused[p.Name] = "UnknownMachine: the node has no NodeResourceTopology"
		} else {
			report.Admitted = append(report.Admitted, p.Name)
		}
	}
	return report
}

func admit(topo nrt, threadsPerCore int, pods []*v1.Pod) nodeReport {
	report := newReport(topo.Metadata.Name)
	info, reserved, reservation, reservedMemory, allocatable, err := machineOf(topo, threadsPerCore)
	if err != nil {
		report.Error = err.Error()
		return report
	}
	report.Allocatable = allocatable
	dir, err := os.MkdirTemp("", "kubelet-admit-")
	if err != nil {
		report.Error = err.Error()
		return report
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	tm, err := topologymanager.NewManager(info.Topology, "single-numa-node", "pod", nil)
	if err != nil {
		report.Error = "topology manager: " + err.Error()
		return report
	}
	options := map[string]string{}
	if threadsPerCore > 1 {
		options["full-pcpus-only"] = "true"
	}
	cpus, err := cpumanager.NewManager("static", options, time.Hour, info, reserved, reservation, dir, tm)
	if err != nil {
		report.Error = "cpu manager: " + err.Error()
		return report
	}
	tm.AddHintProvider(cpus)
	memory, err := memorymanager.NewManager(ctx, "Static", info, reservation, reservedMemory, dir, tm)
	if err != nil {
		report.Error = "memory manager: " + err.Error()
		return report
	}
	tm.AddHintProvider(memory)
	if err := cpus.Start(noPods, sourcesNotReady{}, noStatus{}, noRuntime{}, containermap.NewContainerMap()); err != nil {
		report.Error = "cpu manager start: " + err.Error()
		return report
	}
	if err := memory.Start(ctx, noPods, sourcesNotReady{}, noStatus{}, noRuntime{}, containermap.NewContainerMap()); err != nil {
		report.Error = "memory manager start: " + err.Error()
		return report
	}
	for _, pod := range pods {
		result := tm.Admit(&lifecycle.PodAdmitAttributes{Pod: pod})
		if !result.Admit {
			report.Refused[pod.Name] = result.Reason + ": " + result.Message
			continue
		}
		report.Admitted = append(report.Admitted, pod.Name)
		report.Assigned += exclusiveCPUs(pod)
	}
	report.Idle = report.Allocatable - report.Assigned
	return report
}

func main() {
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&list); err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-admit: stdin: want `kubectl get nodes,noderesourcetopologies,pods -o json`:", err)
		os.Exit(2)
	}
	threads := map[string]int{}
	topologies := map[string]nrt{}
	byNode := map[string][]*v1.Pod{}
	for _, raw := range list.Items {
		var o object
		if err := json.Unmarshal(raw, &o); err != nil {
			fmt.Fprintln(os.Stderr, "kubelet-admit:", err)
			os.Exit(2)
		}
		switch o.Kind {
		case "Node":
			var n v1.Node
			if err := json.Unmarshal(raw, &n); err != nil {
				fmt.Fprintln(os.Stderr, "kubelet-admit: Node:", err)
				os.Exit(2)
			}
			t, err := strconv.Atoi(n.Labels["numaserve.io/threads-per-core"])
			if err != nil || t < 1 {
				t = 1
			}
			threads[n.Name] = t
		case "NodeResourceTopology":
			var t nrt
			if err := json.Unmarshal(raw, &t); err != nil {
				fmt.Fprintln(os.Stderr, "kubelet-admit: NodeResourceTopology:", err)
				os.Exit(2)
			}
			topologies[t.Metadata.Name] = t
		case "Pod":
			var p v1.Pod
			if err := json.Unmarshal(raw, &p); err != nil {
				fmt.Fprintln(os.Stderr, "kubelet-admit: Pod:", err)
				os.Exit(2)
			}
			if p.Spec.NodeName != "" && p.Status.Phase != v1.PodFailed && p.Status.Phase != v1.PodSucceeded {
				byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], &p)
			}
		}
	}
	reports := []nodeReport{}
	names := make([]string, 0, len(byNode))
	for name := range byNode {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		pods := byNode[name]
		// As the kubelet admits them: in the order they were created.
		sort.SliceStable(pods, func(i, j int) bool {
			a, b := pods[i].CreationTimestamp, pods[j].CreationTimestamp
			if !a.Equal(&b) {
				return a.Before(&b)
			}
			return pods[i].Name < pods[j].Name
		})
		topo, ok := topologies[name]
		if !ok {
			reports = append(reports, unknownMachine(name, pods))
			continue
		}
		reports = append(reports, admit(topo, threads[name], pods))
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	if err := out.Encode(reports); err != nil {
		os.Exit(1)
	}
}
