// informer-judge: client-go shared informers (k8s.io/client-go/informers, as every controller and
// kube-proxy uses them) for the kinds named on the command line, reporting their stores on a loopback
// HTTP port. The Rust tests point it at kube-sim and at herald and compare what the stores hold.
//
//	informer-judge --kubeconfig PATH [--listen 127.0.0.1:PORT] [--content-type json|protobuf]
//	               [--watch-list true|false] [--label-selector SEL] [--field-selector SEL]
//	               [--namespace NS] KIND...
//
// KIND is a plural resource name: pods, services, endpoints, endpointslices, nodes, namespaces,
// ingresses, configmaps. WatchList (a watch with sendInitialEvents instead of LIST+WATCH) follows
// client-go's own switch, the environment variable KUBE_FEATURE_WatchListClient (on by default since
// client-go 0.35), which --watch-list sets.
//
// HTTP (loopback only):
//
//	GET /healthz   200 while running
//	GET /synced    200 when every informer has synced, else 503; the body says which have not and
//	               whether WatchListClient is on
//	GET /stores    {"watch_list": bool, "synced": bool, "kinds": {KIND: {KEY: {"rv", "hash"}}},
//	               "requests": {"list"|"watch"|"watch_list"[_CODE]: n}}: every object each
//	               informer's store holds, by namespace/name key, with its resourceVersion and the
//	               SHA-256 of its JSON (metadata.managedFields, apiVersion/kind, nulls and empty lists
//	               and maps left out, keys sorted); and the requests the informers made, by kind of request (a watch with
//	               sendInitialEvents=true is a watch_list) and, when not 200, by status (0: no answer)
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

const version = "informer-judge: k8s.io/client-go v0.37.2 shared informers"

// kinds maps the names the command line takes to the resources client-go's typed informers serve.
var kinds = map[string]schema.GroupVersionResource{
	"pods":           {Version: "v1", Resource: "pods"},
	"services":       {Version: "v1", Resource: "services"},
	"endpoints":      {Version: "v1", Resource: "endpoints"},
	"nodes":          {Version: "v1", Resource: "nodes"},
	"namespaces":     {Version: "v1", Resource: "namespaces"},
	"configmaps":     {Version: "v1", Resource: "configmaps"},
	"endpointslices": {Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
	"ingresses":      {Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"},
}

type entry struct {
	RV   string `json:"rv"`
	Hash string `json:"hash"`
}

type judge struct {
	names     []string
	informers map[string]cache.SharedIndexInformer
	watchList bool
	requests  *requests
}

// requests counts what the informers asked the server, so a test can tell a WatchList sync (a watch
// with sendInitialEvents=true and no LIST) from the LIST+WATCH fallback client-go takes when the
// server answers a WatchList request with an error.
type requests struct {
	mu     sync.Mutex
	counts map[string]int
}

func (r *requests) count(req *http.Request, code int) {
	q := req.URL.Query()
	verb := "list"
	switch {
	case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
		verb = "watch_list"
	case q.Get("watch") == "true":
		verb = "watch"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[verb]++
	if code != http.StatusOK {
		r.counts[fmt.Sprintf("%s_%d", verb, code)]++
	}
}

func (r *requests) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.counts))
	for k, v := range r.counts {
		out[k] = v
	}
	return out
}

type countingTransport struct {
	next http.RoundTripper
	reqs *requests
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	code := 0
	if resp != nil {
		code = resp.StatusCode
	}
	t.reqs.count(req, code)
	return resp, err
}

func (j *judge) unsynced() []string {
	var out []string
	for _, n := range j.names {
		if !j.informers[n].HasSynced() {
			out = append(out, n)
		}
	}
	return out
}

// hash is the SHA-256 of the object's JSON without what a cache may legitimately drop or a decoder
// may leave unset: managedFields (herald drops them) and apiVersion/kind (typed decoders clear them).
func hash(obj any) (string, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return "", err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", err
	}
	delete(m, "apiVersion")
	delete(m, "kind")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	// An empty list or map and an absent one are the same object to client-go (apimachinery's
	// semantic equality), but not the same JSON: a field without omitempty decoded from JSON `[]` is
	// written back `[]`, decoded from protobuf (which has no empty repeated field) it is written
	// `null`. The apiserver's protobuf does the same.
	dropEmpty(m)
	// encoding/json writes map keys sorted, so equal objects hash equally.
	canon, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// dropEmpty removes null values, empty lists and empty maps, recursively (a map emptied by it goes too).
func dropEmpty(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]any:
		for k, e := range t {
			if dropEmpty(e) {
				delete(t, k)
			}
		}
		return len(t) == 0
	case []any:
		for _, e := range t {
			dropEmpty(e)
		}
		return len(t) == 0
	}
	return false
}

func (j *judge) stores() (map[string]map[string]entry, error) {
	out := map[string]map[string]entry{}
	for _, n := range j.names {
		objs := map[string]entry{}
		for _, obj := range j.informers[n].GetStore().List() {
			key, err := cache.MetaNamespaceKeyFunc(obj)
			if err != nil {
				return nil, err
			}
			acc, err := meta.Accessor(obj)
			if err != nil {
				return nil, err
			}
			h, err := hash(obj)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", n, key, err)
			}
			objs[key] = entry{RV: acc.GetResourceVersion(), Hash: h}
		}
		out[n] = objs
	}
	return out, nil
}

func (j *judge) serveSynced(w http.ResponseWriter, _ *http.Request) {
	if missing := j.unsynced(); len(missing) > 0 {
		http.Error(w, fmt.Sprintf("not synced: %s (watch_list=%v)", strings.Join(missing, ","), j.watchList),
			http.StatusServiceUnavailable)
		return
	}
	_, _ = fmt.Fprintf(w, "synced (watch_list=%v)\n", j.watchList)
}

func (j *judge) serveStores(w http.ResponseWriter, _ *http.Request) {
	synced := len(j.unsynced()) == 0
	s, err := j.stores()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"watch_list": j.watchList, "synced": synced, "kinds": s, "requests": j.requests.snapshot(),
	})
}

func run() error {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the server to list and watch")
	listen := flag.String("listen", "127.0.0.1:0", "loopback address to serve /stores on")
	contentType := flag.String("content-type", "json", "json or protobuf: what the client asks for")
	labelSel := flag.String("label-selector", "", "label selector for every informer")
	fieldSel := flag.String("field-selector", "", "field selector for every informer")
	namespace := flag.String("namespace", "", "watch this namespace only (the namespaced path, as Prometheus's namespaces: names)")
	watchList := flag.String("watch-list", "",
		"true or false: sets KUBE_FEATURE_WatchListClient before client-go reads it (default: the environment's)")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	switch *watchList {
	case "":
	case "true", "false":
		// client-go reads its KUBE_FEATURE_* variables once, on the first feature check
		// (k8s.io/client-go/features/envvar.go); nothing has checked one yet.
		if err := os.Setenv("KUBE_FEATURE_WatchListClient", *watchList); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--watch-list %q: true or false", *watchList)
	}
	if *showVersion {
		fmt.Println(version)
		return nil
	}
	if *kubeconfig == "" || flag.NArg() == 0 {
		return errors.New("usage: informer-judge --kubeconfig PATH [flags] KIND...")
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %s: only loopback addresses are served", *listen)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	switch *contentType {
	case "json":
		cfg.ContentType = "application/json"
	case "protobuf":
		// As kube-proxy's --kube-api-content-type and Prometheus's kubernetes_sd set it.
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	default:
		return fmt.Errorf("--content-type %q: json or protobuf", *contentType)
	}
	cfg.UserAgent = "informer-judge/" + *contentType
	reqs := &requests{counts: map[string]int{}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, reqs: reqs} })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(*namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = *labelSel
			o.FieldSelector = *fieldSel
		}))
	j := &judge{
		informers: map[string]cache.SharedIndexInformer{},
		watchList: clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient),
		requests:  reqs,
	}
	for _, n := range flag.Args() {
		gvr, ok := kinds[n]
		if !ok {
			return fmt.Errorf("unknown kind %q", n)
		}
		if _, dup := j.informers[n]; dup {
			continue
		}
		inf, err := factory.ForResource(gvr)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		j.names = append(j.names, n)
		j.informers[n] = inf.Informer()
	}
	sort.Strings(j.names)

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/synced", j.serveSynced)
	mux.HandleFunc("/stores", j.serveStores)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Fprintf(os.Stderr, "informer-judge: serving %s on %s (content type %s, watch_list=%v)\n",
		strings.Join(j.names, ","), ln.Addr(), *contentType, j.watchList)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "informer-judge:", err)
		os.Exit(1)
	}
}
