package bulktxn

import "github.com/cockroachdb/datadriven"

func init() {
	register("tick", tickCmd)
}

// tick now=<since base>: time passes.
func tickCmd(e *env, d *datadriven.TestData) {
	e.step(Tick{Now: e.setNow(d)})
	e.state()
}
