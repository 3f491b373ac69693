// Command quantity answers, for each Go-quoted string read on stdin (one per line), what
// k8s.io/apimachinery's resource package makes of it, so tests can compare our Python port with it.
//
// Mode "parse" (default): each line is one quoted string; the answer is
// "ok\t<String()>\t<unscaled>e<exponent>\t<Format>" (the value as AsDec
// holds it, never expanded: "1e2000000000" must not print two billion digits) or "err".
// Mode "add": each line is two quoted strings separated by a tab; the answer is
// "ok\t<a+b String()>\t<a.Cmp(b)>" or "err" when either does not parse.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

func parse(line string) string {
	text, err := strconv.Unquote(line)
	if err != nil {
		return "bad-line"
	}
	q, err := resource.ParseQuantity(text)
	if err != nil {
		return "err"
	}
	dec := q.AsDec()
	return fmt.Sprintf("ok\t%s\t%se%d\t%s", q.String(), dec.UnscaledBig(), -int64(dec.Scale()), q.Format)
}

func add(line string) string {
	parts := strings.Split(line, "\t")
	if len(parts) != 2 {
		return "bad-line"
	}
	var qs [2]resource.Quantity
	for i, part := range parts {
		text, err := strconv.Unquote(part)
		if err != nil {
			return "bad-line"
		}
		q, err := resource.ParseQuantity(text)
		if err != nil {
			return "err"
		}
		qs[i] = q
	}
	cmp := qs[0].Cmp(qs[1])
	sum := qs[0].DeepCopy()
	sum.Add(qs[1])
	return fmt.Sprintf("ok\t%s\t%d", sum.String(), cmp)
}

func main() {
	answer := parse
	if len(os.Args) > 1 && os.Args[1] == "add" {
		answer = add
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		fmt.Fprintln(out, answer(in.Text()))
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
