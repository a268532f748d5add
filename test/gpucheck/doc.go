// Package gpucheck holds `make gpu-check` (docs/gpu-check.md): tests,
// behind the gpucheck build tag, that run the node daemon's GPU code on
// a machine's real GPUs without Kubernetes, or in CI on a fake NVML. They
// read the inventory through the NVML backend and compare it with
// nvidia-smi, watch the health event stream, sample usage while a CUDA
// process allocates, and run MPS through the node daemon's own
// supervisor with clients limited as the CDI edits limit them.
// hack/gpu-check.sh builds and runs them and prints their one-line JSON
// report.
package gpucheck
