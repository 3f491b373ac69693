// quantity-oracle: Kubernetes' own resource.Quantity, for the Python port's property tests.
//
// Reads one string per line on stdin; for each writes one line on stdout:
//
//	OK <String()> <MilliValue()> <Value()> <Sign()>
//	ERR
//
// (the parse error's text is not compared: only whether it is one).
package main

import (
	"bufio"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/api/resource"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		q, err := resource.ParseQuantity(in.Text())
		if err != nil {
			fmt.Fprintln(out, "ERR")
		} else {
			fmt.Fprintf(out, "OK %s %d %d %d\n", q.String(), q.MilliValue(), q.Value(), q.Sign())
		}
		out.Flush() // one answer per question, at once: the caller waits for it
	}
}
