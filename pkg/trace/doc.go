// Package trace reads cluster traces in the openb format (Alibaba's
// cluster-trace-gpu-v2023, used by the FGD paper) and generates a seeded
// synthetic cluster and workload of the same shape, so that the simulator
// runs without the trace files.
package trace
