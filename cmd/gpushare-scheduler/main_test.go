package main

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The releaser acts in the replica that leads: with no leader elector
// (--leader-elect=false) the one replica; with one, only once it holds
// the lease, read from the gauge client-go's elector keeps in the
// registry kube-scheduler serves.
func TestLeading(t *testing.T) {
	if !leading(legacyregistry.DefaultGatherer) {
		t.Fatal("no leader election: not leading; want the one replica to lead")
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, "kube-system", "gpushare-scheduler", nil,
		fake.NewClientset().CoordinationV1(), resourcelock.ResourceLockConfig{Identity: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{Lock: lock, Name: "gpushare-scheduler",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 100 * time.Millisecond,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) { close(started) }, OnStoppedLeading: func() {}}})
	if err != nil {
		t.Fatal(err)
	}
	if leading(legacyregistry.DefaultGatherer) {
		t.Error("waiting for the lease: leading; want a standby")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go le.Run(ctx)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the elector did not take the free lease")
	}
	if !leading(legacyregistry.DefaultGatherer) {
		t.Error("holding the lease: not leading")
	}
}
