// protoschema: prints the protobuf wire schema of the built-in kinds herald's Kubernetes API face
// serves, read by reflection from the Go types of k8s.io/api and k8s.io/apimachinery (their
// `protobuf:"..."` and `json:"..."` struct tags, which go-to-protobuf generated the .proto files and
// the gogo marshallers from). kube-face embeds the output (crates/kube-face/src/proto/schema.txt) to
// transcode the JSON objects it holds into the bytes apimachinery's protobuf serializer writes; a
// kube-face test runs this command and fails when the embedded schema differs.
//
//	protoschema            print the schema
//	protoschema --version  print the module versions it reads
//
// Format, one line each:
//
//	K <apiVersion> <Kind> <message>          a kind served as <message>
//	M <message>                              a message; its fields follow, by field number
//	F <num> <json> <flags> <type>            json "-" for an inline struct (its JSON fields sit in
//	                                         the parent object); flags "p" pointer (written only when
//	                                         set), "r" repeated, "-" neither (always written)
//
// Types: s string, b bool, i32 int32, i64 int64, f64 float64 (fixed64), y bytes (base64 in JSON),
// time (metav1.Time), mtime (metav1.MicroTime), dur (metav1.Duration), qty (resource.Quantity),
// ios (intstr.IntOrString), raw (runtime.RawExtension), fv1 (metav1.FieldsV1), m:<message>, and
// map:<key>:<value> (a map, its entries written sorted by key).
package main

import (
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
)

const version = "protoschema: k8s.io/api v0.37.2, k8s.io/apimachinery v0.37.2 (client-go v0.37.2 scheme)"

// The group versions whose kinds the face serves as built-ins (kube-face resource.rs BUILTINS).
var groupVersions = []schema.GroupVersion{
	{Group: "", Version: "v1"},
	{Group: "apps", Version: "v1"},
	{Group: "discovery.k8s.io", Version: "v1"},
	{Group: "networking.k8s.io", Version: "v1"},
	{Group: "rbac.authorization.k8s.io", Version: "v1"},
}

var special = map[reflect.Type]string{
	reflect.TypeOf(metav1.Time{}):          "time",
	reflect.TypeOf(metav1.MicroTime{}):     "mtime",
	reflect.TypeOf(metav1.Duration{}):      "dur",
	reflect.TypeOf(resource.Quantity{}):    "qty",
	reflect.TypeOf(intstr.IntOrString{}):   "ios",
	reflect.TypeOf(runtime.RawExtension{}): "raw",
	reflect.TypeOf(metav1.FieldsV1{}):      "fv1",
}

type gen struct {
	done  map[string]bool
	queue []reflect.Type
	out   []string
}

func name(t reflect.Type) string {
	p := t.PkgPath()
	p = strings.TrimPrefix(p, "k8s.io/api/")
	p = strings.TrimPrefix(p, "k8s.io/apimachinery/pkg/apis/")
	p = strings.TrimPrefix(p, "k8s.io/apimachinery/pkg/")
	return p + "." + t.Name()
}

func (g *gen) msg(t reflect.Type) string {
	n := name(t)
	if !g.done[n] {
		g.done[n] = true
		g.queue = append(g.queue, t)
	}
	return "m:" + n
}

// scalar names a non-struct, non-slice Go type by the wire type its protobuf tag gives.
func (g *gen) typ(t reflect.Type, wire string) string {
	if s, ok := special[t]; ok {
		return s
	}
	switch t.Kind() {
	case reflect.String:
		return "s"
	case reflect.Bool:
		return "b"
	case reflect.Int32:
		return "i32"
	case reflect.Int64:
		return "i64"
	case reflect.Float64:
		if wire != "fixed64" && wire != "" {
			panic(fmt.Sprintf("float64 with wire %s", wire))
		}
		return "f64"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "y"
		}
	case reflect.Struct:
		return g.msg(t)
	}
	panic(fmt.Sprintf("unsupported type %s (wire %s)", t, wire))
}

func (g *gen) fields(t reflect.Type) {
	type field struct {
		num  int
		line string
	}
	var fs []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("protobuf")
		if tag == "" {
			continue // TypeMeta and other fields outside the protobuf message
		}
		parts := strings.Split(tag, ",")
		wire := parts[0]
		var num int
		fmt.Sscan(parts[1], &num)
		js := strings.Split(f.Tag.Get("json"), ",")
		jname := js[0]
		if jname == "" {
			// encoding/json: an embedded struct without a name has its fields promoted (inline);
			// any other field without a name is named as in Go.
			jname = f.Name
			if f.Anonymous {
				jname = "-"
			}
		}
		ft := f.Type
		flags := "-"
		var ty string
		switch {
		case ft.Kind() == reflect.Ptr:
			flags = "p"
			ty = g.typ(ft.Elem(), wire)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Uint8:
			flags = "r"
			et := ft.Elem()
			if et.Kind() == reflect.Ptr {
				panic(fmt.Sprintf("%s.%s: slice of pointers", t, f.Name))
			}
			ty = g.typ(et, wire)
		case ft.Kind() == reflect.Map:
			if ft.Key().Kind() != reflect.String {
				panic(fmt.Sprintf("%s.%s: map key %s", t, f.Name, ft.Key()))
			}
			ty = "map:s:" + g.typ(ft.Elem(), "")
		default:
			ty = g.typ(ft, wire)
		}
		fs = append(fs, field{num, fmt.Sprintf("F %d %s %s %s", num, jname, flags, ty)})
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].num < fs[j].num })
	g.out = append(g.out, "M "+name(t))
	for _, f := range fs {
		g.out = append(g.out, f.line)
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println(version)
		return
	}
	g := &gen{done: map[string]bool{}}
	var kinds []string
	for _, gv := range groupVersions {
		for kind, t := range scheme.Scheme.KnownTypes(gv) {
			if _, ok := reflect.New(t).Interface().(interface{ Marshal() ([]byte, error) }); !ok {
				continue
			}
			if t.PkgPath() == "k8s.io/apimachinery/pkg/apis/meta/v1" {
				continue // options types registered into every group version
			}
			kinds = append(kinds, fmt.Sprintf("K %s %s %s", gv.String(), kind, g.msg(t)[2:]))
		}
	}
	// What every stream and error needs besides the kinds.
	g.msg(reflect.TypeOf(metav1.Status{}))
	g.msg(reflect.TypeOf(metav1.WatchEvent{}))
	for len(g.queue) > 0 {
		t := g.queue[0]
		g.queue = g.queue[1:]
		g.fields(t)
	}
	sort.Strings(kinds)
	// Messages in name order, each with its fields.
	type block struct {
		name  string
		lines []string
	}
	var blocks []block
	for _, l := range g.out {
		if strings.HasPrefix(l, "M ") {
			blocks = append(blocks, block{name: l})
		}
		blocks[len(blocks)-1].lines = append(blocks[len(blocks)-1].lines, l)
	}
	sort.Slice(blocks, func(i, j int) bool { return blocks[i].name < blocks[j].name })
	fmt.Println("# Generated by peers/cmd/protoschema (" + version + "); do not edit.")
	for _, k := range kinds {
		fmt.Println(k)
	}
	for _, b := range blocks {
		for _, l := range b.lines {
			fmt.Println(l)
		}
	}
}
