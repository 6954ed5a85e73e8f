package deploy_test

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAlerts checks alerts.yaml with promtool and runs its unit tests
// (alerts_test.yaml): each alert fires on the series that should fire it,
// with its labels and annotations, and stays quiet on the others.
func TestAlerts(t *testing.T) {
	promtool := requireTool(t, "promtool", "make deps installs it: Debian's prometheus package")
	dir := filepath.Dir(alertsFile)
	for _, args := range [][]string{
		{"check", "rules", "alerts.yaml"},
		{"test", "rules", "alerts_test.yaml"},
	} {
		cmd := exec.CommandContext(t.Context(), promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		} else {
			t.Logf("promtool %v:\n%s", args, out)
		}
	}
}
