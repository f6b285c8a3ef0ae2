// Command providermirror is the e2e cluster's provider network mirror: it
// serves, over TLS, the protocol terraform and OpenTofu define for
// network_mirror (index.json, <version>.json, the package) for the
// providers given with -provider, each packed from its binary at start.
// It logs every package it serves, so a test sees which inits fetched.
//
// It stands for what an install runs itself (Artifactory, Nexus, or any
// HTTPS server over `terraform providers mirror`'s output); opr8r only
// points terraform at it (--provider-mirror-url).
package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

type providers []string

func (p *providers) String() string     { return strings.Join(*p, ",") }
func (p *providers) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	var ps providers
	addr := flag.String("addr", ":8443", "listen address")
	cert := flag.String("cert", "", "TLS certificate file")
	key := flag.String("key", "", "TLS key file")
	flag.Var(&ps, "provider", "HOST/NAMESPACE/TYPE=VERSION=BINARY, repeatable: serve BINARY as that provider for linux_amd64")
	flag.Parse()
	mux := http.NewServeMux()
	for _, p := range ps {
		if err := serve(mux, p); err != nil {
			log.Fatal(err)
		}
	}
	log.Printf("serving %d providers on %s", len(ps), *addr)
	log.Fatal(http.ListenAndServeTLS(*addr, *cert, *key, mux))
}

// serve packs one provider and registers its three documents.
func serve(mux *http.ServeMux, spec string) error {
	parts := strings.SplitN(spec, "=", 3)
	if len(parts) != 3 || strings.Count(parts[0], "/") != 2 {
		return fmt.Errorf("-provider %q: want HOST/NAMESPACE/TYPE=VERSION=BINARY", spec)
	}
	addr, version, bin := parts[0], parts[1], parts[2]
	exe, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var pkg bytes.Buffer
	zw := zip.NewWriter(&pkg)
	h := &zip.FileHeader{Name: filepath.Base(bin), Method: zip.Deflate}
	h.SetMode(0o755)
	w, err := zw.CreateHeader(h)
	if err != nil {
		return err
	}
	if _, err := w.Write(exe); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	sum := sha256.Sum256(pkg.Bytes())
	typ := addr[strings.LastIndex(addr, "/")+1:]
	zipName := fmt.Sprintf("terraform-provider-%s_%s_linux_amd64.zip", typ, version)
	base := "/" + addr + "/"
	jsonDoc := func(v any) http.HandlerFunc {
		b, _ := json.Marshal(v)
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(b)
		}
	}
	mux.Handle(base+"index.json", jsonDoc(map[string]any{"versions": map[string]any{version: map[string]any{}}}))
	mux.Handle(base+version+".json", jsonDoc(map[string]any{"archives": map[string]any{
		"linux_amd64": map[string]any{"url": zipName, "hashes": []string{"zh:" + hex.EncodeToString(sum[:])}}}}))
	mux.HandleFunc(base+zipName, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			log.Printf("package %s %s (%d bytes) to %s", addr, version, pkg.Len(), r.RemoteAddr)
		}
		w.Header().Set("Content-Type", "application/zip")
		http.ServeContent(w, r, zipName, time.Time{}, bytes.NewReader(pkg.Bytes()))
	})
	log.Printf("%s %s: %s, zh:%x, %s", addr, version, zipName, sum, hashV1(filepath.Base(bin), exe))
	return nil
}

// hashV1 is terraform's "h1:" hash of a package of one file (Go's
// dirhash.Hash1 of its contents), the checksum a lock file lists for a
// package in the plugin cache: the e2e's modules commit it
// (TestProviderCache).
func hashV1(name string, content []byte) string {
	line := fmt.Sprintf("%x  %s\n", sha256.Sum256(content), name)
	sum := sha256.Sum256([]byte(line))
	return "h1:" + base64.StdEncoding.EncodeToString(sum[:])
}
