// protojudge: judges a Kubernetes API face's protobuf (application/vnd.kubernetes.protobuf) with
// apimachinery's own serializer (k8s.io/apimachinery v0.37.2, client-go v0.37.2's scheme).
//
//	protojudge --server URL [--gets N] [--watch-seconds S] KIND...
//	protojudge quantities      (stdin: one quantity per line; stdout: Quantity.String() or ERROR)
//	protojudge random --n N --seed S KIND...
//	                           random objects of each kind (sigs.k8s.io/randfill, with valid values
//	                           for the types with their own JSON: Time, MicroTime, Quantity,
//	                           IntOrString, RawExtension, FieldsV1), one JSON line each:
//	                           {"kind", "json": the object as encoding/json writes it, "proto":
//	                           base64 of Go's protobuf marshalling of that JSON decoded again}; Go
//	                           itself checks that the protobuf decodes back to the same object
//	protojudge measure --server URL [--runs N] KIND...
//	                           what a list costs in each format: bytes, the server's answer time (the
//	                           first protobuf list encodes, later ones reuse), and client-go's decode
//	                           time (the universal deserializer into typed objects, median of N)
//	protojudge --version
//
// For each KIND (a plural: pods, services, endpointslices, ...), against the server:
//   - the list in JSON and in protobuf: the protobuf answer has the protobuf Content-Type, decodes to
//     objects equal (apimachinery's semantic equality) to the JSON ones, and its bytes equal Go's
//     protobuf encoding of the JSON-decoded list; each item's bytes equal Go's marshalling of the
//     JSON-decoded item;
//   - up to N objects by GET, the same for each;
//   - a protobuf watch with sendInitialEvents and bookmarks for S seconds: each frame is a
//     length-prefixed metav1.WatchEvent whose bytes equal Go's marshalling of the decoded event, each
//     object's bytes Go's encoding of the decoded object, the initial ADDED objects equal the JSON
//     list's, and the k8s.io/initial-events-end bookmark arrives.
//
// It prints a JSON report ({"kinds": {KIND: {...}}, "failures": [...]}) and exits 1 when any check
// fails.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/randfill"
)

const version = "protojudge: k8s.io/apimachinery v0.37.2 protobuf serializer, client-go v0.37.2 scheme"

const protoType = "application/vnd.kubernetes.protobuf"

// paths: a plural's collection path (cluster-wide) and whether it is namespaced.
var paths = map[string]struct {
	prefix     string
	namespaced bool
}{
	"pods":                {"/api/v1", true},
	"services":            {"/api/v1", true},
	"endpoints":           {"/api/v1", true},
	"configmaps":          {"/api/v1", true},
	"serviceaccounts":     {"/api/v1", true},
	"nodes":               {"/api/v1", false},
	"namespaces":          {"/api/v1", false},
	"endpointslices":      {"/apis/discovery.k8s.io/v1", true},
	"ingresses":           {"/apis/networking.k8s.io/v1", true},
	"networkpolicies":     {"/apis/networking.k8s.io/v1", true},
	"ingressclasses":      {"/apis/networking.k8s.io/v1", false},
	"servicecidrs":        {"/apis/networking.k8s.io/v1", false},
	"deployments":         {"/apis/apps/v1", true},
	"daemonsets":          {"/apis/apps/v1", true},
	"statefulsets":        {"/apis/apps/v1", true},
	"replicasets":         {"/apis/apps/v1", true},
	"roles":               {"/apis/rbac.authorization.k8s.io/v1", true},
	"rolebindings":        {"/apis/rbac.authorization.k8s.io/v1", true},
	"clusterroles":        {"/apis/rbac.authorization.k8s.io/v1", false},
	"clusterrolebindings": {"/apis/rbac.authorization.k8s.io/v1", false},
}

type kindReport struct {
	ListItems        int  `json:"list_items"`
	ListBytesEqual   bool `json:"list_bytes_equal"`
	ListDecodeEqual  bool `json:"list_decode_equal"`
	Gets             int  `json:"gets"`
	WatchEvents      int  `json:"watch_events"`
	WatchBookmarks   int  `json:"watch_bookmarks"`
	InitialEventsEnd bool `json:"initial_events_end"`
}

type judge struct {
	server   string
	failures []string
	pb       *protobuf.Serializer
}

func (j *judge) fail(format string, args ...any) {
	j.failures = append(j.failures, fmt.Sprintf(format, args...))
}

func (j *judge) get(path, accept string) ([]byte, string, error) {
	req, err := http.NewRequest("GET", j.server+path, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != 200 {
		return nil, "", fmt.Errorf("GET %s (%s): %d %s", path, accept, resp.StatusCode, truncate(body))
	}
	return body, resp.Header.Get("Content-Type"), nil
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

func (j *judge) encode(obj runtime.Object) []byte {
	var buf bytes.Buffer
	if err := j.pb.Encode(obj, &buf); err != nil {
		j.fail("Go cannot encode %T: %v", obj, err)
	}
	return buf.Bytes()
}

func marshal(obj any) ([]byte, error) {
	m, ok := obj.(interface{ Marshal() ([]byte, error) })
	if !ok {
		return nil, fmt.Errorf("%T has no protobuf marshaller", obj)
	}
	return m.Marshal()
}

// diff describes where two encodings part.
func diff(want, got []byte) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	lo := max(i-24, 0)
	return fmt.Sprintf("lengths go=%d face=%d, first difference at byte %d; go[%d:]=%s face[%d:]=%s", len(want), len(got), i,
		lo, hex.EncodeToString(want[lo:min(len(want), i+24)]), lo, hex.EncodeToString(got[lo:min(len(got), i+24)]))
}

// unknownRaw returns the raw message of an enveloped (k8s\0 + runtime.Unknown) object.
func unknownRaw(b []byte) ([]byte, error) {
	if !bytes.HasPrefix(b, []byte("k8s\x00")) {
		return nil, fmt.Errorf("no k8s\\0 prefix")
	}
	var u runtime.Unknown
	if err := u.Unmarshal(b[4:]); err != nil {
		return nil, err
	}
	return u.Raw, nil
}

// listItems splits a list message into its items' raw bytes (field 2).
func listItems(raw []byte) ([][]byte, error) {
	var items [][]byte
	for i := 0; i < len(raw); {
		tag, n := binary.Uvarint(raw[i:])
		if n <= 0 {
			return nil, fmt.Errorf("bad tag at %d", i)
		}
		i += n
		if tag&7 != 2 {
			return nil, fmt.Errorf("field %d has wire type %d", tag>>3, tag&7)
		}
		l, n := binary.Uvarint(raw[i:])
		if n <= 0 || i+n+int(l) > len(raw) {
			return nil, fmt.Errorf("bad length at %d", i)
		}
		i += n
		if tag>>3 == 2 {
			items = append(items, raw[i:i+int(l)])
		}
		i += int(l)
	}
	return items, nil
}

// objDiff is "" when apimachinery's semantic equality holds, else go-cmp's account of the difference.
func objDiff(a, b runtime.Object) string {
	if equality.Semantic.DeepEqual(a, b) {
		return ""
	}
	d := cmp.Diff(a, b)
	if len(d) > 800 {
		d = d[:800] + "..."
	}
	return d
}

func withoutTypeMeta(obj runtime.Object) runtime.Object {
	c := obj.DeepCopyObject()
	c.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return c
}

func name(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "?"
	}
	if m.GetNamespace() != "" {
		return m.GetNamespace() + "/" + m.GetName()
	}
	return m.GetName()
}

func (j *judge) kind(plural string, gets int, watchFor time.Duration) kindReport {
	var rep kindReport
	p, ok := paths[plural]
	if !ok {
		j.fail("unknown kind %s", plural)
		return rep
	}
	base := p.prefix + "/" + plural
	decoder := scheme.Codecs.UniversalDeserializer()

	jsonBody, _, err := j.get(base, "application/json")
	if err != nil {
		j.fail("%s: %v", plural, err)
		return rep
	}
	jsonList, _, err := decoder.Decode(jsonBody, nil, nil)
	if err != nil {
		j.fail("%s: JSON list does not decode: %v", plural, err)
		return rep
	}
	// The same list in protobuf, at the JSON list's resourceVersion (the cluster may be churning).
	jm, err := meta.ListAccessor(jsonList)
	if err != nil {
		j.fail("%s: JSON list has no list metadata: %v", plural, err)
		return rep
	}
	pbBody, ct, err := j.get(base+"?resourceVersionMatch=Exact&resourceVersion="+jm.GetResourceVersion(), protoType+", application/json")
	if err != nil {
		j.fail("%s: %v", plural, err)
		return rep
	}
	if ct != protoType {
		j.fail("%s: list answered with Content-Type %q", plural, ct)
		return rep
	}
	pbList, _, err := decoder.Decode(pbBody, nil, nil)
	if err != nil {
		j.fail("%s: protobuf list does not decode: %v", plural, err)
		return rep
	}
	jsonItems, _ := meta.ExtractList(jsonList)
	pbItems, _ := meta.ExtractList(pbList)
	rep.ListItems = len(pbItems)
	rep.ListDecodeEqual = len(jsonItems) == len(pbItems)
	if !rep.ListDecodeEqual {
		j.fail("%s: JSON list has %d items, protobuf %d", plural, len(jsonItems), len(pbItems))
	}
	byName := map[string]runtime.Object{}
	for i := range jsonItems {
		byName[name(jsonItems[i])] = jsonItems[i]
		// A list item's apiVersion and kind are not in its protobuf encoding (the list's are).
		if i < len(pbItems) {
			if d := objDiff(withoutTypeMeta(jsonItems[i]), withoutTypeMeta(pbItems[i])); d != "" {
				rep.ListDecodeEqual = false
				j.fail("%s %s: protobuf item decodes to a different object than JSON: %s", plural, name(jsonItems[i]), d)
			}
		}
	}
	want := j.encode(jsonList)
	rep.ListBytesEqual = bytes.Equal(want, pbBody)
	if !rep.ListBytesEqual {
		j.fail("%s: list bytes differ from Go's encoding of the JSON list: %s", plural, diff(want, pbBody))
	}
	raw, err := unknownRaw(pbBody)
	if err == nil {
		var items [][]byte
		items, err = listItems(raw)
		for i := 0; err == nil && i < len(items) && i < len(jsonItems); i++ {
			want, merr := marshal(jsonItems[i])
			if merr != nil {
				j.fail("%s: %v", plural, merr)
				break
			}
			if !bytes.Equal(want, items[i]) {
				j.fail("%s %s: item bytes differ from Go's marshalling of the JSON object: %s", plural, name(jsonItems[i]), diff(want, items[i]))
			}
		}
	}
	if err != nil {
		j.fail("%s: protobuf list envelope: %v", plural, err)
	}

	for i := 0; i < gets && i < len(jsonItems); i++ {
		m, _ := meta.Accessor(jsonItems[i])
		path := p.prefix
		if p.namespaced {
			path += "/namespaces/" + m.GetNamespace()
		}
		path += "/" + plural + "/" + m.GetName()
		jb, _, err := j.get(path, "application/json")
		if err != nil {
			j.fail("%s: %v", plural, err)
			continue
		}
		pb, ct, err := j.get(path, protoType)
		if err != nil {
			j.fail("%s: %v", plural, err)
			continue
		}
		if ct != protoType {
			j.fail("%s: get answered with Content-Type %q", plural, ct)
		}
		jo, _, err := decoder.Decode(jb, nil, nil)
		if err != nil {
			j.fail("%s: JSON object does not decode: %v", plural, err)
			continue
		}
		po, _, err := decoder.Decode(pb, nil, nil)
		if err != nil {
			j.fail("%s %s: protobuf object does not decode: %v", plural, name(jo), err)
			continue
		}
		jom, _ := meta.Accessor(jo)
		pom, _ := meta.Accessor(po)
		if jom.GetResourceVersion() != pom.GetResourceVersion() {
			continue // changed between the two reads
		}
		rep.Gets++
		if d := objDiff(jo, po); d != "" {
			j.fail("%s %s: protobuf object decodes to a different object than JSON: %s", plural, name(jo), d)
		}
		if want := j.encode(jo); !bytes.Equal(want, pb) {
			j.fail("%s %s: get bytes differ from Go's encoding: %s", plural, name(jo), diff(want, pb))
		}
	}

	if watchFor > 0 {
		j.watch(plural, base, watchFor, byName, &rep)
	}
	return rep
}

func (j *judge) watch(plural, base string, watchFor time.Duration, byName map[string]runtime.Object, rep *kindReport) {
	url := j.server + base + "?watch=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=" + fmt.Sprint(int(watchFor.Seconds())+1)
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Accept", protoType+", application/json")
	client := &http.Client{Timeout: watchFor + 5*time.Second}
	resp, err := client.Do(req)
	if err != nil {
		j.fail("%s watch: %v", plural, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		j.fail("%s watch: %d %s", plural, resp.StatusCode, truncate(b))
		return
	}
	if ct := resp.Header.Get("Content-Type"); ct != protoType+";stream=watch" {
		j.fail("%s watch: Content-Type %q", plural, ct)
		return
	}
	decoder := scheme.Codecs.UniversalDeserializer()
	deadline := time.Now().Add(watchFor)
	r := bufio.NewReader(resp.Body)
	for time.Now().Before(deadline) {
		var hdr [4]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err != io.EOF && !strings.Contains(err.Error(), "Client.Timeout") {
				j.fail("%s watch: frame header: %v", plural, err)
			}
			return
		}
		frame := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(r, frame); err != nil {
			j.fail("%s watch: frame: %v", plural, err)
			return
		}
		var ev metav1.WatchEvent
		if err := ev.Unmarshal(frame); err != nil {
			j.fail("%s watch: WatchEvent does not decode: %v", plural, err)
			return
		}
		if again, _ := ev.Marshal(); !bytes.Equal(again, frame) {
			j.fail("%s watch: WatchEvent bytes differ from Go's: %s", plural, diff(again, frame))
		}
		obj, _, err := decoder.Decode(ev.Object.Raw, nil, nil)
		if err != nil {
			j.fail("%s watch: %s object does not decode: %v", plural, ev.Type, err)
			return
		}
		if want := j.encode(obj); !bytes.Equal(want, ev.Object.Raw) {
			j.fail("%s watch: %s %s bytes differ from Go's encoding: %s", plural, ev.Type, name(obj), diff(want, ev.Object.Raw))
		}
		switch ev.Type {
		case "BOOKMARK":
			rep.WatchBookmarks++
			if m, err := meta.Accessor(obj); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				rep.InitialEventsEnd = true
			}
		case "ERROR":
			j.fail("%s watch: ERROR event: %v", plural, obj)
		default:
			rep.WatchEvents++
			if !rep.InitialEventsEnd && ev.Type == "ADDED" {
				if want, ok := byName[name(obj)]; ok {
					wm, _ := meta.Accessor(want)
					om, _ := meta.Accessor(obj)
					if wm.GetResourceVersion() == om.GetResourceVersion() {
						if d := objDiff(withoutTypeMeta(want), withoutTypeMeta(obj)); d != "" {
							j.fail("%s watch: ADDED %s decodes to a different object than the JSON list's: %s", plural, name(obj), d)
						}
					}
				}
			}
		}
	}
	if !rep.InitialEventsEnd {
		j.fail("%s watch: no k8s.io/initial-events-end bookmark", plural)
	}
}

func quantities() {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		q, err := resource.ParseQuantity(strings.TrimSpace(sc.Text()))
		if err != nil {
			fmt.Println("ERROR")
			continue
		}
		fmt.Println(q.String())
	}
}

// gvks: the group version kind of each plural.
func gvkOf(plural string) (schema.GroupVersionKind, bool) {
	p, ok := paths[plural]
	if !ok {
		return schema.GroupVersionKind{}, false
	}
	gv := strings.TrimPrefix(strings.TrimPrefix(p.prefix, "/apis/"), "/api/")
	group, version := "", gv
	if i := strings.Index(gv, "/"); i >= 0 {
		group, version = gv[:i], gv[i+1:]
	}
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if gvk.Group == group && gvk.Version == version && strings.ToLower(gvk.Kind) == strings.TrimSuffix(strings.TrimSuffix(plural, "es"), "s") ||
			gvk.Group == group && gvk.Version == version && strings.ToLower(gvk.Kind)+"s" == plural ||
			gvk.Group == group && gvk.Version == version && strings.ToLower(gvk.Kind)+"es" == plural ||
			gvk.Group == group && gvk.Version == version && strings.ToLower(gvk.Kind) == plural ||
			gvk.Group == group && gvk.Version == version && strings.TrimSuffix(strings.ToLower(gvk.Kind), "y")+"ies" == plural {
			return gvk, true
		}
	}
	return schema.GroupVersionKind{}, false
}

func filler(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0.3).NumElements(0, 2).MaxDepth(12).Funcs(
		func(t *metav1.Time, c randfill.Continue) {
			if c.Intn(4) == 0 {
				*t = metav1.Time{}
				return
			}
			*t = metav1.Unix(c.Int63n(4_000_000_000)-1_000_000_000, 0).Rfc3339Copy()
		},
		func(t *metav1.MicroTime, c randfill.Continue) {
			*t = metav1.NewMicroTime(time.Unix(c.Int63n(4_000_000_000), c.Int63n(1_000_000_000)).UTC().Truncate(time.Microsecond))
		},
		func(q *resource.Quantity, c randfill.Continue) {
			forms := []string{"0", "1", "100m", "0.5", "1.5Gi", "1024Ki", "1e3", "12e6", "129M", "7800m", "31.5Gi", "1n", "-2", "0.1m", "4000000k", "512Mi", "3Ki", "1.0"}
			if c.Intn(2) == 0 {
				*q = resource.MustParse(forms[c.Intn(len(forms))])
				return
			}
			*q = *resource.NewMilliQuantity(c.Int63n(1<<40)-(1<<20), []resource.Format{resource.DecimalSI, resource.BinarySI, resource.DecimalExponent}[c.Intn(3)])
		},
		func(v *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*v = intstr.FromInt32(c.Int31() - 1<<30)
			} else {
				*v = intstr.FromString(c.String(8))
			}
		},
		func(r *runtime.RawExtension, c randfill.Continue) {
			r.Raw = []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"X","n":%d,"s":%q}`, c.Intn(1000), c.String(5)))
		},
		func(f *metav1.FieldsV1, c randfill.Continue) {
			key, _ := json.Marshal("f:" + c.String(4))
			f.Raw = []byte(fmt.Sprintf(`{"f:metadata":{"f:labels":{%s:{}}}}`, key))
		},
	)
}

func random(args []string) {
	fs := flag.NewFlagSet("random", flag.ExitOnError)
	n := fs.Int("n", 50, "objects per kind")
	seed := fs.Int64("seed", 1, "random seed")
	fs.Parse(args)
	pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	decoder := scheme.Codecs.UniversalDeserializer()
	f := filler(*seed)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	failed := false
	for _, plural := range fs.Args() {
		gvk, ok := gvkOf(plural)
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown kind %s\n", plural)
			os.Exit(2)
		}
		for i := 0; i < *n; i++ {
			obj, err := scheme.Scheme.New(gvk)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			f.Fill(obj)
			obj.GetObjectKind().SetGroupVersionKind(gvk)
			js, err := json.Marshal(obj)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s #%d: encoding/json: %v\n", plural, i, err)
				failed = true
				continue
			}
			again, err := scheme.Scheme.New(gvk)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			if err := json.Unmarshal(js, again); err != nil {
				fmt.Fprintf(os.Stderr, "%s #%d: decoding its JSON: %v\n", plural, i, err)
				failed = true
				continue
			}
			raw, err := marshal(again)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			var enveloped bytes.Buffer
			if err := pb.Encode(again, &enveloped); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			back, _, err := decoder.Decode(enveloped.Bytes(), nil, nil)
			if err != nil || !equality.Semantic.DeepEqual(back, again) {
				fmt.Fprintf(os.Stderr, "%s #%d: Go's own protobuf does not round-trip: %v %s\n", plural, i, err, objDiff(again, back))
				failed = true
			}
			line, _ := json.Marshal(map[string]any{"kind": plural, "json": string(js), "proto": raw})
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	out.Flush()
	if failed {
		os.Exit(1)
	}
}

type measurement struct {
	Items           int     `json:"items"`
	JSONBytes       int     `json:"json_bytes"`
	ProtoBytes      int     `json:"proto_bytes"`
	JSONListMs      float64 `json:"json_list_ms"`
	ProtoFirstMs    float64 `json:"proto_first_list_ms"`
	ProtoListMs     float64 `json:"proto_list_ms"`
	JSONDecodeMs    float64 `json:"json_decode_ms"`
	ProtoDecodeMs   float64 `json:"proto_decode_ms"`
	BytesRatio      float64 `json:"proto_over_json_bytes"`
	DecodeTimeRatio float64 `json:"proto_over_json_decode"`
}

func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

func measure(args []string) {
	fs := flag.NewFlagSet("measure", flag.ExitOnError)
	server := fs.String("server", "", "base URL")
	runs := fs.Int("runs", 5, "repetitions (medians are reported)")
	fs.Parse(args)
	j := &judge{server: strings.TrimRight(*server, "/")}
	decoder := scheme.Codecs.UniversalDeserializer()
	timed := func(path, accept string) ([]byte, float64) {
		t := time.Now()
		b, _, err := j.get(path, accept)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return b, float64(time.Since(t).Microseconds()) / 1000
	}
	decodeMs := func(b []byte) (float64, int) {
		t := time.Now()
		obj, _, err := decoder.Decode(b, nil, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		items, _ := meta.ExtractList(obj)
		return float64(time.Since(t).Microseconds()) / 1000, len(items)
	}
	report := map[string]measurement{}
	for _, plural := range fs.Args() {
		p, ok := paths[plural]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown kind %s\n", plural)
			os.Exit(2)
		}
		base := p.prefix + "/" + plural
		var m measurement
		var jl, pl, jd, pd []float64
		var jb, pb []byte
		for r := 0; r < *runs; r++ {
			b, ms := timed(base, protoType)
			if r == 0 {
				m.ProtoFirstMs = ms
			} else {
				pl = append(pl, ms)
			}
			pb = b
			b, ms = timed(base, "application/json")
			jl = append(jl, ms)
			jb = b
			d, n := decodeMs(jb)
			jd = append(jd, d)
			m.Items = n
			d, _ = decodeMs(pb)
			pd = append(pd, d)
		}
		if len(pl) == 0 {
			pl = []float64{m.ProtoFirstMs}
		}
		m.JSONBytes, m.ProtoBytes = len(jb), len(pb)
		m.JSONListMs, m.ProtoListMs = median(jl), median(pl)
		m.JSONDecodeMs, m.ProtoDecodeMs = median(jd), median(pd)
		m.BytesRatio = float64(m.ProtoBytes) / float64(max(m.JSONBytes, 1))
		m.DecodeTimeRatio = m.ProtoDecodeMs / max(m.JSONDecodeMs, 0.001)
		report[plural] = m
	}
	out, _ := json.MarshalIndent(report, "", "  ")
	fmt.Println(string(out))
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "measure" {
		measure(os.Args[2:])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "quantities" {
		quantities()
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "random" {
		random(os.Args[2:])
		return
	}
	server := flag.String("server", "", "the face's base URL (http://127.0.0.1:PORT)")
	gets := flag.Int("gets", 20, "objects of each kind read one by one")
	watchSeconds := flag.Float64("watch-seconds", 2, "how long each kind's protobuf watch is read")
	showVersion := flag.Bool("version", false, "print the version")
	flag.Parse()
	if *showVersion {
		fmt.Println(version)
		return
	}
	if *server == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: protojudge --server URL [--gets N] [--watch-seconds S] KIND...")
		os.Exit(2)
	}
	j := &judge{server: strings.TrimRight(*server, "/"), pb: protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)}
	report := map[string]kindReport{}
	for _, k := range flag.Args() {
		report[k] = j.kind(k, *gets, time.Duration(*watchSeconds*float64(time.Second)))
	}
	out, _ := json.MarshalIndent(map[string]any{"kinds": report, "failures": j.failures}, "", "  ")
	fmt.Println(string(out))
	if len(j.failures) > 0 {
		os.Exit(1)
	}
}
