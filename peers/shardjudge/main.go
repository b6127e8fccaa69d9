// shardjudge: the upstream's KEP-5866 shard selector (k8s.io/apiserver/pkg/sharding.Parse and
// k8s.io/apimachinery/pkg/sharding Matches, v0.37.2) as a judge for herald's and kube-sim's
// reimplementation. Reads JSON lines {"selector", "uid", "namespace"} on stdin and answers one JSON
// line each: {"error"} when Parse refuses the selector, else {"canonical", "matches"} for an object
// with that uid and namespace. A test peer, never shipped.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/sharding"
)

type question struct {
	Selector  string `json:"selector"`
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
}

type answer struct {
	Error     string `json:"error,omitempty"`
	Canonical string `json:"canonical,omitempty"`
	Matches   bool   `json:"matches"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("shardjudge: k8s.io/apiserver v0.37.2 sharding.Parse")
		return
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for in.Scan() {
		var q question
		if err := json.Unmarshal(in.Bytes(), &q); err != nil {
			fmt.Fprintf(os.Stderr, "shardjudge: bad input line: %v\n", err)
			os.Exit(2)
		}
		var a answer
		sel, err := sharding.Parse(q.Selector)
		if err != nil {
			a.Error = err.Error()
		} else {
			a.Canonical = sel.String()
			obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: types.UID(q.UID), Namespace: q.Namespace}}
			a.Matches, err = sel.Matches(obj)
			if err != nil {
				a.Error = "match: " + err.Error()
			}
		}
		if err := enc.Encode(a); err != nil {
			fmt.Fprintf(os.Stderr, "shardjudge: %v\n", err)
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "shardjudge: %v\n", err)
		os.Exit(2)
	}
}
