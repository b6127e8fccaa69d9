// promsd: Prometheus's own kubernetes_sd (github.com/prometheus/prometheus/discovery/kubernetes) run as
// a library, writing its target groups as JSON. Skeleton; the dumper lands with its tests.
package main

import (
	"fmt"
	"os"

	_ "github.com/prometheus/prometheus/discovery/kubernetes"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("promsd: skeleton")
		return
	}
	fmt.Fprintln(os.Stderr, "promsd: not built yet")
	os.Exit(2)
}
