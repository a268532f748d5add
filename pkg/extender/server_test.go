package extender

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestSoftPreferences(t *testing.T) {
	term := corev1.WeightedPodAffinityTerm{Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname"}}
	for _, c := range []struct {
		name string
		spec corev1.PodSpec
		want bool
	}{
		{"none", corev1.PodSpec{}, false},
		{"required node affinity only", corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{}}}}, false},
		{"preferred node affinity", corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1}}}}}, true},
		{"preferred pod affinity", corev1.PodSpec{Affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{term}}}}, true},
		{"preferred pod anti-affinity", corev1.PodSpec{Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{term}}}}, true},
		{"spread, do not schedule", corev1.PodSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
			{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule}}}, false},
		{"spread, schedule anyway", corev1.PodSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
			{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.ScheduleAnyway}}}, true},
	} {
		if got := softPreferences(&corev1.Pod{Spec: c.spec}); got != c.want {
			t.Errorf("%s: softPreferences = %v, want %v", c.name, got, c.want)
		}
	}
}
