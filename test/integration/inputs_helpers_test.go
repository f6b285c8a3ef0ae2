package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opr8r/opr8r/pkg/inputs"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

// inputsEnvRE finds the clone step's inputs variable in a child's JSON,
// whichever engine built it.
var inputsEnvRE = regexp.MustCompile(`"name":"` + pipeline.InputsEnv + `","value":"([A-Za-z0-9+/=]+)"`)

// childInputs decodes the inputs a child carries in its clone step.
func childInputs(child client.Object) inputs.Inputs {
	b, err := json.Marshal(child)
	Expect(err).NotTo(HaveOccurred())
	m := inputsEnvRE.FindAllStringSubmatch(string(b), -1)
	Expect(m).To(HaveLen(1), "the child carries its inputs in one variable of its clone step")
	in, err := inputs.Decode(m[0][1])
	Expect(err).NotTo(HaveOccurred())
	return in
}

// incompressible is n bytes of hex that gzip cannot shrink below half, so
// an inline file of it is too large to travel in the child.
func incompressible(n int) string {
	var b strings.Builder
	sum := sha256.Sum256([]byte("opr8r"))
	for b.Len() < n {
		b.WriteString(hex.EncodeToString(sum[:]))
		sum = sha256.Sum256(sum[:])
	}
	return b.String()[:n]
}
