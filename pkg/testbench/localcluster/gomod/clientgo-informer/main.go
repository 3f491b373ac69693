// clientgo-informer: the baseline of `make bench`'s informer part (bench/informer.py). It runs
// client-go's shared informer over every pod, as a Go controller would (protobuf by default), and
// prints one JSON line with the same fields as bench/informer_worker.py: the time from the
// informer's start until its event handler has seen every expected pod, the process CPU spent
// meanwhile, and memory (VmRSS before and after, VmHWM, and the Go heap after sync).
//
// Memory is read after runtime.GC() and debug.FreeOSMemory(), so VmRSS after sync is what the
// cache holds rather than garbage the Go runtime has not yet returned to the kernel; the Go heap
// figures (heap_alloc_synced, heap_inuse_synced) say the same from the runtime's side.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

type measurement struct {
	Candidate       string  `json:"candidate"`
	Expected        int     `json:"expected"`
	Cached          int     `json:"cached"`
	SyncSeconds     float64 `json:"sync_seconds"`
	CPUSeconds      float64 `json:"cpu_seconds"`
	RSSBaseline     int64   `json:"rss_baseline"`
	RSSSynced       int64   `json:"rss_synced"`
	PeakRSS         int64   `json:"peak_rss"`
	PeakReset       bool    `json:"peak_reset"`
	HeapAllocSynced uint64  `json:"heap_alloc_synced"`
	HeapInuseSynced uint64  `json:"heap_inuse_synced"`
	ContentType     string  `json:"content_type"`
	GoMaxProcs      int     `json:"gomaxprocs"`
}

func statusBytes(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fail(fmt.Errorf("reading /proc/self/status: %w", err))
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, field+":") {
			parts := strings.Fields(line)
			kib, err := strconv.ParseInt(parts[1], 10, 64)
			if err != nil {
				fail(fmt.Errorf("%s in /proc/self/status: %w", field, err))
			}
			return kib * 1024
		}
	}
	fail(fmt.Errorf("%s missing from /proc/self/status", field))
	return 0
}

// resetPeak sets VmHWM to the current RSS, as bench/memory.py does; false where the kernel refuses.
func resetPeak() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		fail(fmt.Errorf("getrusage: %w", err))
	}
	seconds := func(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }
	return seconds(usage.Utime) + seconds(usage.Stime)
}

func settledMemory() runtime.MemStats {
	runtime.GC()
	debug.FreeOSMemory()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return stats
}

// stripUnread drops what our informer's default transform drops (managedFields and kubectl's
// last-applied annotation), so the two caches hold the same fields.
func stripUnread(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok {
		pod.ManagedFields = nil
		delete(pod.Annotations, lastApplied)
	}
	return obj, nil
}

func fail(err error) {
	out, _ := json.Marshal(map[string]string{"error": err.Error()})
	fmt.Println(string(out))
	os.Exit(1)
}

func main() {
	candidate := flag.String("candidate", "client-go-protobuf", "name printed in the result")
	server := flag.String("server", "", "API server URL")
	caFile := flag.String("ca-file", "", "CA bundle")
	certFile := flag.String("cert-file", "", "client certificate")
	keyFile := flag.String("key-file", "", "client key")
	expect := flag.Int("expect", 0, "pods to wait for")
	timeout := flag.Duration("timeout", 15*time.Minute, "give up after")
	contentType := flag.String("content-type", "protobuf", "protobuf or json")
	strip := flag.Bool("strip", false, "drop managedFields and the last-applied annotation")
	namespace := flag.String("namespace", "", "only this namespace's pods (default: every pod)")
	flag.Parse()
	if *server == "" || *expect <= 0 {
		fail(fmt.Errorf("--server and a positive --expect are required"))
	}

	config := &rest.Config{
		Host: *server,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: *caFile, CertFile: *certFile, KeyFile: *keyFile,
		},
		QPS:   1000,
		Burst: 1000,
	}
	switch *contentType {
	case "protobuf":
		config.ContentType = "application/vnd.kubernetes.protobuf"
		config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	case "json":
		config.ContentType = "application/json"
	default:
		fail(fmt.Errorf("--content-type must be protobuf or json, not %q", *contentType))
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail(err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(
		client, 0, informers.WithNamespace(*namespace),
	)
	informer := factory.Core().V1().Pods().Informer()
	if *strip {
		if err := informer.SetTransform(stripUnread); err != nil {
			fail(err)
		}
	}
	var adds atomic.Int64
	done := make(chan struct{})
	var synced time.Time
	var cpuAtSync float64
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) {
			if adds.Add(1) == int64(*expect) {
				synced = time.Now()
				cpuAtSync = cpuSeconds()
				close(done)
			}
		},
	})
	if err != nil {
		fail(err)
	}

	settledMemory()
	baseline := statusBytes("VmRSS")
	peakReset := resetPeak()
	cpuStarted := cpuSeconds()
	started := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	select {
	case <-done:
	case <-time.After(*timeout):
		fail(fmt.Errorf("not synced after %s (%d adds)", *timeout, adds.Load()))
	}
	stats := settledMemory()
	result := measurement{
		Candidate:       *candidate,
		Expected:        *expect,
		Cached:          len(informer.GetStore().ListKeys()),
		SyncSeconds:     synced.Sub(started).Seconds(),
		CPUSeconds:      cpuAtSync - cpuStarted,
		RSSBaseline:     baseline,
		RSSSynced:       statusBytes("VmRSS"),
		PeakRSS:         statusBytes("VmHWM"),
		PeakReset:       peakReset,
		HeapAllocSynced: stats.HeapAlloc,
		HeapInuseSynced: stats.HeapInuse,
		ContentType:     *contentType,
		GoMaxProcs:      runtime.GOMAXPROCS(0),
	}
	out, err := json.Marshal(result)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
	cancel()
	os.Exit(0)
}
