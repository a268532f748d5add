// Package podresources asks the kubelet's PodResources API which
// container holds which devices: a client for its List and Get calls, a
// decoder of their answers that keeps only pods, containers, resources
// and device IDs (Listing), and the sharing of calls among the many
// PreStartContainer calls of a burst of starts (Client: one listing under
// way serves every caller that it began late enough for, one Get of a
// pod likewise).
package podresources
