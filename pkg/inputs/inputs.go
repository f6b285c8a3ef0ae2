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

// maxDecoded bounds what Decode inflates to: well past anything Encode
// accepts (pipeline.MaxEmbeddedInputs of compressed text), so a corrupt or
// hostile value cannot fill the step's memory.
const maxDecoded = 16 << 20

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
		return in, fmt.Errorf("the embedded inputs inflate past %d bytes", maxDecoded)
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return in, fmt.Errorf("the embedded inputs are not JSON: %w", err)
	}
	return in, nil
}
