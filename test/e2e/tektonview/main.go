// Command tektonview serves the e2e cluster's Tekton page: the Tekton
// Dashboard's own components (@tektoncd/dashboard-components from the npm
// registry) in a small page of opr8r's (test/e2e/tektonview/web, built by
// test/e2e/dashboards.sh), and the page's reads of the Kubernetes API,
// proxied with this server's service account as the dashboard's backend
// does. Only reads pass: the page is read-only, like the dashboard in its
// read-only mode (people approve with `kubectl tfrun approve`).
//
//	tektonview -static /web -listen :9097 [-kubeconfig FILE]
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	listen := flag.String("listen", ":9097", "address to serve on")
	static := flag.String("static", "/web", "the built page (index.html and its assets)")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig; empty: the pod's service account")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("tektonview: %v", err)
	}
	h, err := handler(cfg, *static)
	if err != nil {
		log.Fatalf("tektonview: %v", err)
	}
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("tektonview: serving %s on %s, reading %s", *static, *listen, cfg.Host)
	log.Fatal(srv.ListenAndServe())
}

// handler serves the page from static and proxies GETs under /api/ and
// /apis/ to the API server of cfg, with cfg's credentials.
func handler(cfg *rest.Config, static string) (http.Handler, error) {
	if _, err := os.Stat(filepath.Join(static, "index.html")); err != nil {
		return nil, fmt.Errorf("no built page in %s: %w", static, err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("API server address %q: %w", cfg.Host, err)
	}
	if cfg.APIPath != "" && cfg.APIPath != "/api" {
		return nil, fmt.Errorf("API server address %q has a path prefix, which this proxy does not keep", cfg.Host)
	}
	proxy := &httputil.ReverseProxy{
		Transport: rt,
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			// The browser's own credentials never reach the API server:
			// every read is the service account's.
			r.Out.Header.Del("Authorization")
			r.Out.Header.Del("Cookie")
			for h := range r.Out.Header {
				if strings.HasPrefix(strings.ToLower(h), "impersonate-") {
					r.Out.Header.Del(h)
				}
			}
		},
	}
	mux := http.NewServeMux()
	mux.Handle("/api/", readOnly(proxy))
	mux.Handle("/apis/", readOnly(proxy))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.Handle("/", page(static))
	return mux, nil
}

// readOnly passes GET and HEAD and refuses every other method.
func readOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "this page is read-only: "+r.Method+" is refused (approve or reject a plan with kubectl tfrun approve|reject)", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// page serves the built files; any other path is the page itself (its
// router uses the URL's fragment, so only / is asked for in practice).
func page(static string) http.Handler {
	files := http.FileServer(http.Dir(static))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := path.Clean("/" + r.URL.Path)
		if p != "/" && p != "/index.html" {
			if st, err := os.Stat(filepath.Join(static, filepath.FromSlash(p))); err == nil && !st.IsDir() {
				// Assets carry a content hash in their names.
				w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
				files.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFile(w, r, filepath.Join(static, "index.html"))
	})
}
