package v1alpha1_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpusharev1 "github.com/gpushare/gpushare/apis/gpushare/v1alpha1"
)

var (
	inventoryType  = metav1.TypeMeta{APIVersion: gpusharev1.APIVersion, Kind: gpusharev1.KindGPUInventory}
	allocationType = metav1.TypeMeta{APIVersion: gpusharev1.APIVersion, Kind: gpusharev1.KindAllocation}
)

// validInventory returns a fresh, valid four-GPU inventory: two NVLink
// pairs on two NUMA nodes, one GPU unhealthy.
func validInventory() *gpusharev1.GPUInventory {
	return &gpusharev1.GPUInventory{
		TypeMeta: inventoryType,
		Mode:     gpusharev1.ModeShared,
		GPUs: []gpusharev1.GPU{
			{Index: 0, UUID: "GPU-aaaa-0", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true, NUMANode: 0, NVLinkPeers: []int{1}},
			{Index: 1, UUID: "GPU-aaaa-1", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true, NUMANode: 0, NVLinkPeers: []int{0}},
			{Index: 2, UUID: "GPU-aaaa-2", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: false, NUMANode: 1, NVLinkPeers: []int{3}},
			{Index: 3, UUID: "GPU-aaaa-3", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true, NUMANode: -1},
		},
	}
}

// validAllocation returns a fresh, valid allocation with one container of
// each kind.
func validAllocation() *gpusharev1.Allocation {
	return &gpusharev1.Allocation{
		TypeMeta: allocationType,
		Node:     "gpu-node-1",
		Containers: []gpusharev1.ContainerAllocation{
			{Name: "fetch", Kind: gpusharev1.ContainerInit, GPUs: []gpusharev1.GPUShare{
				{Index: 0, UUID: "GPU-aaaa-0", MemoryMiB: 1024, Compute: 10},
			}},
			{Name: "proxy", Kind: gpusharev1.ContainerSidecar, GPUs: []gpusharev1.GPUShare{
				{Index: 1, UUID: "GPU-aaaa-1", MemoryMiB: 0, Compute: 0},
			}},
			{Name: "train", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{
				{Index: 0, UUID: "GPU-aaaa-0", MemoryMiB: 40960, Compute: 50},
				{Index: 1, UUID: "GPU-aaaa-1", MemoryMiB: 40960, Compute: 100},
			}},
		},
	}
}

func TestMarshalParseInventoryRoundTrip(t *testing.T) {
	tests := map[string]func(*gpusharev1.GPUInventory){
		"shared":            func(*gpusharev1.GPUInventory) {},
		"whole card":        func(inv *gpusharev1.GPUInventory) { inv.Mode = gpusharev1.ModeWholeCard },
		"single GPU":        func(inv *gpusharev1.GPUInventory) { inv.GPUs = inv.GPUs[3:]; inv.GPUs[0].Index = 0 },
		"no type meta":      func(inv *gpusharev1.GPUInventory) { inv.TypeMeta = metav1.TypeMeta{} },
		"wrong type meta":   func(inv *gpusharev1.GPUInventory) { inv.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Node"} },
		"several NVLink":    func(inv *gpusharev1.GPUInventory) { inv.GPUs[3].NVLinkPeers = []int{0, 1, 2} },
		"NUMA unknown (-1)": func(inv *gpusharev1.GPUInventory) { inv.GPUs[0].NUMANode = -1 },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			in := validInventory()
			mutate(in)
			// What Parse must return: the input with the type Marshal sets.
			want := validInventory()
			mutate(want)
			want.TypeMeta = inventoryType

			value, err := gpusharev1.Marshal(in)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if in.TypeMeta != inventoryType {
				t.Errorf("Marshal left TypeMeta %+v, want %+v", in.TypeMeta, inventoryType)
			}
			var raw map[string]any
			if err := json.Unmarshal([]byte(value), &raw); err != nil {
				t.Fatalf("Marshal wrote invalid JSON %q: %v", value, err)
			}
			if raw["apiVersion"] != gpusharev1.APIVersion || raw["kind"] != gpusharev1.KindGPUInventory {
				t.Errorf("Marshal wrote apiVersion %v kind %v, want %s %s", raw["apiVersion"], raw["kind"], gpusharev1.APIVersion, gpusharev1.KindGPUInventory)
			}
			got, err := gpusharev1.ParseInventory(value)
			if err != nil {
				t.Fatalf("ParseInventory(%s): %v", value, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("round trip changed the inventory (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMarshalParseAllocationRoundTrip(t *testing.T) {
	tests := map[string]func(*gpusharev1.Allocation){
		"init, sidecar and app": func(*gpusharev1.Allocation) {},
		"app only": func(a *gpusharev1.Allocation) {
			a.Containers = a.Containers[2:]
		},
		"no containers": func(a *gpusharev1.Allocation) { a.Containers = nil },
		"no type meta":  func(a *gpusharev1.Allocation) { a.TypeMeta = metav1.TypeMeta{} },
		"compute bounds": func(a *gpusharev1.Allocation) {
			a.Containers[2].GPUs[0].Compute = 0
			a.Containers[2].GPUs[1].Compute = 100
		},
		"memory only (0%)": func(a *gpusharev1.Allocation) { a.Containers[0].GPUs[0].Compute = 0 },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			in := validAllocation()
			mutate(in)
			want := validAllocation()
			mutate(want)
			want.TypeMeta = allocationType

			value, err := gpusharev1.Marshal(in)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if in.TypeMeta != allocationType {
				t.Errorf("Marshal left TypeMeta %+v, want %+v", in.TypeMeta, allocationType)
			}
			got, err := gpusharev1.ParseAllocation(value)
			if err != nil {
				t.Fatalf("ParseAllocation(%s): %v", value, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("round trip changed the allocation (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMarshalRejectsOtherTypes(t *testing.T) {
	for _, v := range []any{
		gpusharev1.GPUInventory{}, // not a pointer
		gpusharev1.Allocation{},
		&gpusharev1.GPU{},
		"text",
		nil,
	} {
		value, err := gpusharev1.Marshal(v)
		if err == nil {
			t.Errorf("Marshal(%T) = %q, want an error", v, value)
			continue
		}
		if value != "" {
			t.Errorf("Marshal(%T) returned %q with its error, want empty", v, value)
		}
	}
}

func TestParseInventoryDefaultsMode(t *testing.T) {
	inv := validInventory()
	inv.Mode = ""
	value, err := gpusharev1.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(value, `"mode"`) {
		t.Fatalf("empty mode should be omitted, got %s", value)
	}
	got, err := gpusharev1.ParseInventory(value)
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != gpusharev1.ModeShared {
		t.Errorf("Mode = %q, want %q for an inventory without a mode", got.Mode, gpusharev1.ModeShared)
	}
	if errs := gpusharev1.ValidateInventory(inv); len(errs) != 0 {
		t.Errorf("ValidateInventory rejects an empty mode: %v", errs)
	}
}

// An inventory written before GPUs said whether they run MPS parses as
// it did, with no GPU under MPS; a GPU marked so round-trips.
func TestParseInventoryMPS(t *testing.T) {
	old := `{"apiVersion":"gpushare.io/v1alpha1","kind":"GPUInventory","gpus":[` +
		`{"index":0,"uuid":"GPU-a","model":"Tesla T4","memoryMiB":15360,"healthy":true,"numaNode":0}]}`
	got, err := gpusharev1.ParseInventory(old)
	if err != nil {
		t.Fatal(err)
	}
	if got.GPUs[0].MPS {
		t.Errorf("an inventory without the field has an MPS GPU")
	}
	got.GPUs[0].MPS = true
	value, err := gpusharev1.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	again, err := gpusharev1.ParseInventory(value)
	if err != nil || !again.GPUs[0].MPS || !strings.Contains(value, `"mps":true`) {
		t.Errorf("MPS GPU did not round-trip: %s (%v)", value, err)
	}
}

// A GPU books against its usable memory where the inventory gives it,
// else against all of it (inventories from before the field).
func TestGPUUsable(t *testing.T) {
	for _, tc := range []struct{ total, usable, want int64 }{
		{15360, 0, 15360},     // no field: all of it
		{15360, 14911, 14911}, // 15360 - 449 reserved
		{15360, 15360, 15360},
	} {
		g := gpusharev1.GPU{MemoryMiB: tc.total, UsableMemoryMiB: tc.usable}
		if got := g.Usable(); got != tc.want {
			t.Errorf("Usable() of %d MiB, %d usable = %d, want %d", tc.total, tc.usable, got, tc.want)
		}
	}
}

// fieldErr is the one validation error a bad input must produce.
type fieldErr struct {
	path string
	typ  field.ErrorType
}

func checkOneError(t *testing.T, errs field.ErrorList, want fieldErr) {
	t.Helper()
	if len(errs) != 1 {
		t.Fatalf("got %d errors, want exactly one on %s: %v", len(errs), want.path, errs)
	}
	if errs[0].Field != want.path || errs[0].Type != want.typ {
		t.Errorf("got error %q (field %s, type %s), want field %s type %s", errs[0].Error(), errs[0].Field, errs[0].Type, want.path, want.typ)
	}
}

func TestValidateInventory(t *testing.T) {
	if errs := gpusharev1.ValidateInventory(validInventory()); len(errs) != 0 {
		t.Fatalf("valid inventory rejected: %v", errs)
	}
	tests := []struct {
		name   string
		mutate func(*gpusharev1.GPUInventory)
		want   fieldErr
	}{
		{"wrong apiVersion", func(inv *gpusharev1.GPUInventory) { inv.APIVersion = "gpushare.io/v1" },
			fieldErr{"apiVersion", field.ErrorTypeNotSupported}},
		{"no apiVersion", func(inv *gpusharev1.GPUInventory) { inv.APIVersion = "" },
			fieldErr{"apiVersion", field.ErrorTypeNotSupported}},
		{"wrong kind", func(inv *gpusharev1.GPUInventory) { inv.Kind = gpusharev1.KindAllocation },
			fieldErr{"kind", field.ErrorTypeNotSupported}},
		{"bad mode", func(inv *gpusharev1.GPUInventory) { inv.Mode = "shared" },
			fieldErr{"mode", field.ErrorTypeNotSupported}},
		{"no GPUs", func(inv *gpusharev1.GPUInventory) { inv.GPUs = nil },
			fieldErr{"gpus", field.ErrorTypeRequired}},
		{"duplicate index", func(inv *gpusharev1.GPUInventory) { inv.GPUs[2].Index = 1 },
			fieldErr{"gpus[2].index", field.ErrorTypeInvalid}},
		{"index out of order", func(inv *gpusharev1.GPUInventory) { inv.GPUs[3].Index = 4 },
			fieldErr{"gpus[3].index", field.ErrorTypeInvalid}},
		{"usable above total", func(inv *gpusharev1.GPUInventory) { inv.GPUs[1].UsableMemoryMiB = inv.GPUs[1].MemoryMiB + 1 },
			fieldErr{"gpus[1].usableMemoryMiB", field.ErrorTypeInvalid}},
		{"negative usable", func(inv *gpusharev1.GPUInventory) { inv.GPUs[1].UsableMemoryMiB = -1 },
			fieldErr{"gpus[1].usableMemoryMiB", field.ErrorTypeInvalid}},
		{"empty UUID", func(inv *gpusharev1.GPUInventory) { inv.GPUs[1].UUID = "" },
			fieldErr{"gpus[1].uuid", field.ErrorTypeRequired}},
		{"duplicate UUID", func(inv *gpusharev1.GPUInventory) { inv.GPUs[3].UUID = inv.GPUs[0].UUID },
			fieldErr{"gpus[3].uuid", field.ErrorTypeDuplicate}},
		{"zero memory", func(inv *gpusharev1.GPUInventory) { inv.GPUs[2].MemoryMiB = 0 },
			fieldErr{"gpus[2].memoryMiB", field.ErrorTypeInvalid}},
		{"negative memory", func(inv *gpusharev1.GPUInventory) { inv.GPUs[0].MemoryMiB = -1 },
			fieldErr{"gpus[0].memoryMiB", field.ErrorTypeInvalid}},
		{"NUMA node below -1", func(inv *gpusharev1.GPUInventory) { inv.GPUs[1].NUMANode = -2 },
			fieldErr{"gpus[1].numaNode", field.ErrorTypeInvalid}},
		{"NVLink peer past the last GPU", func(inv *gpusharev1.GPUInventory) { inv.GPUs[3].NVLinkPeers = []int{0, len(inv.GPUs)} },
			fieldErr{"gpus[3].nvlinkPeers[1]", field.ErrorTypeInvalid}},
		{"negative NVLink peer", func(inv *gpusharev1.GPUInventory) { inv.GPUs[0].NVLinkPeers = []int{-1} },
			fieldErr{"gpus[0].nvlinkPeers[0]", field.ErrorTypeInvalid}},
		{"NVLink peer is itself", func(inv *gpusharev1.GPUInventory) { inv.GPUs[2].NVLinkPeers = []int{2} },
			fieldErr{"gpus[2].nvlinkPeers[0]", field.ErrorTypeInvalid}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv := validInventory()
			tc.mutate(inv)
			checkOneError(t, gpusharev1.ValidateInventory(inv), tc.want)

			// ParseInventory rejects the same input, naming the field
			// and the annotation. Build the JSON by hand: Marshal would
			// fix apiVersion and kind.
			b, err := json.Marshal(inv)
			if err != nil {
				t.Fatal(err)
			}
			got, err := gpusharev1.ParseInventory(string(b))
			if err == nil {
				t.Fatalf("ParseInventory(%s) = %+v, want an error", b, got)
			}
			if got != nil {
				t.Errorf("ParseInventory returned %+v with its error, want nil", got)
			}
			for _, s := range []string{gpusharev1.InventoryAnnotation, tc.want.path} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("ParseInventory error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestValidateInventoryReportsEveryError(t *testing.T) {
	inv := validInventory()
	inv.Kind = "Nodes"
	inv.GPUs[1].MemoryMiB = 0
	inv.GPUs[2].UUID = inv.GPUs[1].UUID
	errs := gpusharev1.ValidateInventory(inv)
	got := map[string]bool{}
	for _, e := range errs {
		got[e.Field] = true
	}
	for _, f := range []string{"kind", "gpus[1].memoryMiB", "gpus[2].uuid"} {
		if !got[f] {
			t.Errorf("no error on %s in %v", f, errs)
		}
	}
	if len(errs) != 3 {
		t.Errorf("got %d errors, want 3: %v", len(errs), errs)
	}
}

func TestValidateAllocation(t *testing.T) {
	if errs := gpusharev1.ValidateAllocation(validAllocation()); len(errs) != 0 {
		t.Fatalf("valid allocation rejected: %v", errs)
	}
	tests := []struct {
		name   string
		mutate func(*gpusharev1.Allocation)
		want   fieldErr
	}{
		{"wrong apiVersion", func(a *gpusharev1.Allocation) { a.APIVersion = "v1" },
			fieldErr{"apiVersion", field.ErrorTypeNotSupported}},
		{"wrong kind", func(a *gpusharev1.Allocation) { a.Kind = gpusharev1.KindGPUInventory },
			fieldErr{"kind", field.ErrorTypeNotSupported}},
		{"no node", func(a *gpusharev1.Allocation) { a.Node = "" },
			fieldErr{"node", field.ErrorTypeRequired}},
		{"container without name", func(a *gpusharev1.Allocation) { a.Containers[1].Name = "" },
			fieldErr{"containers[1].name", field.ErrorTypeRequired}},
		{"duplicate container name", func(a *gpusharev1.Allocation) { a.Containers[2].Name = a.Containers[0].Name },
			fieldErr{"containers[2].name", field.ErrorTypeDuplicate}},
		{"unknown container kind", func(a *gpusharev1.Allocation) { a.Containers[2].Kind = "Ephemeral" },
			fieldErr{"containers[2].kind", field.ErrorTypeNotSupported}},
		{"container kind in lower case", func(a *gpusharev1.Allocation) { a.Containers[0].Kind = "init" },
			fieldErr{"containers[0].kind", field.ErrorTypeNotSupported}},
		{"no container kind", func(a *gpusharev1.Allocation) { a.Containers[1].Kind = "" },
			fieldErr{"containers[1].kind", field.ErrorTypeNotSupported}},
		{"container with no GPUs", func(a *gpusharev1.Allocation) { a.Containers[0].GPUs = nil },
			fieldErr{"containers[0].gpus", field.ErrorTypeRequired}},
		{"negative GPU index", func(a *gpusharev1.Allocation) { a.Containers[2].GPUs[1].Index = -1 },
			fieldErr{"containers[2].gpus[1].index", field.ErrorTypeInvalid}},
		{"GPU twice in a container", func(a *gpusharev1.Allocation) { a.Containers[2].GPUs[1].Index = 0 },
			fieldErr{"containers[2].gpus[1].index", field.ErrorTypeInvalid}},
		{"GPU without UUID", func(a *gpusharev1.Allocation) { a.Containers[2].GPUs[0].UUID = "" },
			fieldErr{"containers[2].gpus[0].uuid", field.ErrorTypeRequired}},
		{"negative memory", func(a *gpusharev1.Allocation) { a.Containers[0].GPUs[0].MemoryMiB = -1 },
			fieldErr{"containers[0].gpus[0].memoryMiB", field.ErrorTypeInvalid}},
		{"negative compute", func(a *gpusharev1.Allocation) { a.Containers[2].GPUs[0].Compute = -1 },
			fieldErr{"containers[2].gpus[0].compute", field.ErrorTypeInvalid}},
		{"compute over 100", func(a *gpusharev1.Allocation) { a.Containers[2].GPUs[1].Compute = 101 },
			fieldErr{"containers[2].gpus[1].compute", field.ErrorTypeInvalid}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := validAllocation()
			tc.mutate(a)
			checkOneError(t, gpusharev1.ValidateAllocation(a), tc.want)

			b, err := json.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			got, err := gpusharev1.ParseAllocation(string(b))
			if err == nil {
				t.Fatalf("ParseAllocation(%s) = %+v, want an error", b, got)
			}
			if got != nil {
				t.Errorf("ParseAllocation returned %+v with its error, want nil", got)
			}
			for _, s := range []string{gpusharev1.AllocationAnnotation, tc.want.path} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("ParseAllocation error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestValidateAllocationSameGPUInTwoContainers(t *testing.T) {
	// Index uniqueness is per container: two containers may share a GPU.
	a := validAllocation()
	if a.Containers[0].GPUs[0].Index != a.Containers[2].GPUs[0].Index {
		t.Fatal("fixture: containers 0 and 2 should share GPU 0")
	}
	if errs := gpusharev1.ValidateAllocation(a); len(errs) != 0 {
		t.Errorf("GPU shared by two containers rejected: %v", errs)
	}
}

func TestParseMalformed(t *testing.T) {
	inv, err := gpusharev1.Marshal(validInventory())
	if err != nil {
		t.Fatal(err)
	}
	al, err := gpusharev1.Marshal(validAllocation())
	if err != nil {
		t.Fatal(err)
	}
	parsers := map[string]struct {
		annotation string
		valid      string
		parse      func(string) (any, error)
	}{
		"inventory": {gpusharev1.InventoryAnnotation, inv, func(s string) (any, error) {
			v, err := gpusharev1.ParseInventory(s)
			if v == nil {
				return nil, err
			}
			return v, err
		}},
		"allocation": {gpusharev1.AllocationAnnotation, al, func(s string) (any, error) {
			v, err := gpusharev1.ParseAllocation(s)
			if v == nil {
				return nil, err
			}
			return v, err
		}},
	}
	for pname, p := range parsers {
		tests := []struct {
			name  string
			value string
			// syntax is true for a syntax error, false for a type error.
			syntax bool
		}{
			{"empty", "", true},
			{"not JSON", "gpus: 4", true},
			{"truncated", p.valid[:len(p.valid)/2], true},
			{"trailing garbage", p.valid + "}", true},
			{"array", "[]", false},
			{"string", `"` + gpusharev1.APIVersion + `"`, false},
		}
		for _, tc := range tests {
			t.Run(pname+"/"+tc.name, func(t *testing.T) {
				got, err := p.parse(tc.value)
				if err == nil {
					t.Fatalf("parsed %q as %+v, want an error", tc.value, got)
				}
				if got != nil {
					t.Errorf("returned %+v with its error, want nil", got)
				}
				if !strings.HasPrefix(err.Error(), p.annotation+": ") {
					t.Errorf("error %q does not start with the annotation %s", err, p.annotation)
				}
				var syntaxErr *json.SyntaxError
				var typeErr *json.UnmarshalTypeError
				if tc.syntax && !errors.As(err, &syntaxErr) {
					t.Errorf("error %q does not wrap a *json.SyntaxError", err)
				}
				if !tc.syntax && !errors.As(err, &typeErr) {
					t.Errorf("error %q does not wrap a *json.UnmarshalTypeError", err)
				}
			})
		}
	}
}

func TestParseWrongFieldType(t *testing.T) {
	tests := []struct {
		name, value, field string
		parse              func(string) error
	}{
		{"inventory memory as string",
			`{"apiVersion":"gpushare.io/v1alpha1","kind":"GPUInventory","gpus":[{"index":0,"uuid":"GPU-0","memoryMiB":"80Gi","healthy":true}]}`,
			"memoryMiB",
			func(s string) error { _, err := gpusharev1.ParseInventory(s); return err }},
		{"inventory peers as number",
			`{"apiVersion":"gpushare.io/v1alpha1","kind":"GPUInventory","gpus":[{"index":0,"uuid":"GPU-0","memoryMiB":1,"nvlinkPeers":1}]}`,
			"nvlinkPeers",
			func(s string) error { _, err := gpusharev1.ParseInventory(s); return err }},
		{"allocation compute as float",
			`{"apiVersion":"gpushare.io/v1alpha1","kind":"Allocation","node":"n","containers":[{"name":"c","kind":"App","gpus":[{"index":0,"uuid":"GPU-0","memoryMiB":1,"compute":0.5}]}]}`,
			"compute",
			func(s string) error { _, err := gpusharev1.ParseAllocation(s); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse(tc.value)
			var typeErr *json.UnmarshalTypeError
			if !errors.As(err, &typeErr) {
				t.Fatalf("error %v does not wrap a *json.UnmarshalTypeError", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name the field %s", err, tc.field)
			}
		})
	}
}

// The parsers are lenient about unknown fields (ParseInventory documents
// it: a newer node daemon's additions must not stop an older scheduler).
func TestParseIgnoresUnknownFields(t *testing.T) {
	inv := `{"apiVersion":"gpushare.io/v1alpha1","kind":"GPUInventory","driver":"550.54",` +
		`"gpus":[{"index":0,"uuid":"GPU-0","model":"L4","memoryMiB":23034,"healthy":true,"numaNode":0,"migEnabled":false}]}`
	gotInv, err := gpusharev1.ParseInventory(inv)
	if err != nil {
		t.Fatalf("ParseInventory with unknown fields: %v", err)
	}
	wantInv := &gpusharev1.GPUInventory{TypeMeta: inventoryType, Mode: gpusharev1.ModeShared,
		GPUs: []gpusharev1.GPU{{Index: 0, UUID: "GPU-0", Model: "L4", MemoryMiB: 23034, Healthy: true, NUMANode: 0}}}
	if diff := cmp.Diff(wantInv, gotInv); diff != "" {
		t.Errorf("ParseInventory (-want +got):\n%s", diff)
	}

	al := `{"apiVersion":"gpushare.io/v1alpha1","kind":"Allocation","node":"n1","scheduler":"gpushare",` +
		`"containers":[{"name":"c","kind":"App","image":"x","gpus":[{"index":2,"uuid":"GPU-2","memoryMiB":512,"compute":5,"mig":""}]}]}`
	gotAl, err := gpusharev1.ParseAllocation(al)
	if err != nil {
		t.Fatalf("ParseAllocation with unknown fields: %v", err)
	}
	wantAl := &gpusharev1.Allocation{TypeMeta: allocationType, Node: "n1", Containers: []gpusharev1.ContainerAllocation{
		{Name: "c", Kind: gpusharev1.ContainerApp, GPUs: []gpusharev1.GPUShare{{Index: 2, UUID: "GPU-2", MemoryMiB: 512, Compute: 5}}}}}
	if diff := cmp.Diff(wantAl, gotAl); diff != "" {
		t.Errorf("ParseAllocation (-want +got):\n%s", diff)
	}
}

// A missing numaNode decodes as 0, and a missing "healthy" as false: the
// parser fills in no defaults besides the mode.
func TestParseInventoryZeroValues(t *testing.T) {
	got, err := gpusharev1.ParseInventory(`{"apiVersion":"gpushare.io/v1alpha1","kind":"GPUInventory","gpus":[{"index":0,"uuid":"GPU-0","memoryMiB":1}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if g := got.GPUs[0]; g.Healthy || g.NUMANode != 0 || g.NVLinkPeers != nil {
		t.Errorf("got %+v, want unhealthy, NUMA node 0, no peers", g)
	}
}
