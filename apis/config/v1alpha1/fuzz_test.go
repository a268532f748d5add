package v1alpha1

import (
	"encoding/json"
	"testing"
)

// Config files are written by operators and may be anything: the loaders
// never panic, what they accept is valid, and it loads again unchanged
// from its own JSON.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("apiVersion: config.gpushare.io/v1alpha1\nkind: GPUShareArgs\nnodePolicy: binpack\n"))
	f.Add([]byte("apiVersion: config.gpushare.io/v1alpha1\nkind: GPUShareArgs\nresourceModel:\n  unitOverrides:\n  - {name: aliyun.com/gpu-mem, unit: MiB, namespaces: [team-mib]}\n"))
	f.Add([]byte("apiVersion: config.gpushare.io/v1alpha1\nkind: ResourceModel\nresources:\n- {name: aliyun.com/gpu-mem, kind: Memory, unit: MiB}\n"))
	f.Add([]byte(`{"apiVersion":"config.gpushare.io/v1alpha1","kind":"GPUShareArgs","NodePolicy":"spread"}`))
	f.Add([]byte("apiVersion: config.gpushare.io/v1alpha1\nkind: GPUShareArgs\nreservedMemory:\n- {model: Tesla T4, mib: 449}\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if a, err := LoadArgs(data); err == nil {
			if errs := ValidateArgs(a); len(errs) > 0 {
				t.Fatalf("LoadArgs accepted invalid args: %v", errs)
			}
			b, err := json.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := LoadArgs(b); err != nil {
				t.Fatalf("accepted args do not load again from %s: %v", b, err)
			}
		}
		if m, err := Load(data); err == nil {
			if errs := Validate(m); len(errs) > 0 {
				t.Fatalf("Load accepted an invalid model: %v", errs)
			}
		}
	})
}
