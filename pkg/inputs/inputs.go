// Package inputs is the wire format of a run's inputs carried inside its
// child: the variables of spec.terraform.vars (as the bytes of vars.json)
// and an inline source's files, as JSON, gzipped and base64-encoded into
// one environment variable of the clone step, which writes them into the
// workspace. The manager encodes (pkg/pipeline), the step runner decodes
// (pkg/step), so both sides share this one definition.
package inputs

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
)

// Inputs are what a run's steps read besides its source and its Secrets.
type Inputs struct {
	// Vars is vars.json as the plan step reads it: a JSON object of the
	// run's spec.terraform.vars.
	Vars string `json:"vars"`
	// Files are an inline source's files, by name.
	Files map[string]string `json:"files,omitempty"`
}

// MaxContent is the most content the inputs carry: vars.json's name and
// text and each inline file's name and text, counted as a ConfigMap
// counts them. It is the API server's 1 MiB limit on a ConfigMap's data,
// which the manager holds inputs to (pkg/pipeline: inputs a ConfigMap
// could not hold are refused, never embedded), so nothing the manager
// wrote is larger.
const MaxContent = 1 << 20

// maxDecoded bounds what Decode inflates to: MaxContent as JSON, whose
// quoting and escaping grow a byte at most sevenfold (a one-byte file name
// with no content is seven bytes, "<" is six), and no more, so a corrupt or
// hostile value (a gzip stream inflates a thousandfold) cannot fill the
// step's memory.
const maxDecoded = 7*MaxContent + 64

// Encode returns the inputs as base64 of gzipped JSON. The same inputs
// always give the same text (map keys are sorted, the gzip header carries
// no name or time), so a child built twice for the same spec is the same.
func Encode(in Inputs) (string, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	if _, err := zw.Write(b); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// Decode reads what Encode wrote.
func Decode(s string) (Inputs, error) {
	var in Inputs
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return in, fmt.Errorf("the embedded inputs are not base64: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return in, fmt.Errorf("the embedded inputs are not gzip: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(zr, maxDecoded+1))
	if err != nil {
		return in, fmt.Errorf("the embedded inputs are not gzip: %w", err)
	}
	if len(b) > maxDecoded {
		return in, fmt.Errorf("the embedded inputs inflate past %d bytes, more than inputs of at most %d bytes (the 1 MiB a ConfigMap holds) encode to: refused", maxDecoded, MaxContent)
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return in, fmt.Errorf("the embedded inputs are not JSON: %w", err)
	}
	if n := in.size(); n > MaxContent {
		return Inputs{}, fmt.Errorf("the embedded inputs hold %d bytes of vars and files, past the %d a ConfigMap holds, which the manager never embeds: refused", n, MaxContent)
	}
	return in, nil
}

// size is the inputs' content as a ConfigMap counts it: keys and values.
func (in Inputs) size() int {
	n := len(varsKey) + len(in.Vars)
	for k, v := range in.Files {
		n += len(k) + len(v)
	}
	return n
}

// varsKey is the key vars.json has in an inputs ConfigMap
// (pipeline.VarsKey; pkg/pipeline imports this package, so it is named
// here again).
const varsKey = ".vars.json"
