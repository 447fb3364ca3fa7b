package bulktxn

import "github.com/cockroachdb/datadriven"

func init() {
	register("abort", abortCmd)
}

// abort [now=...]: Abort.
func abortCmd(e *env, d *datadriven.TestData) {
	e.step(AbortRequested{Req: e.reqArg(d), Now: e.setNow(d)})
	e.state()
}
