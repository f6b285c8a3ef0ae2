package envtestutil

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Server is a real S3-compatible server, versitygw (built from the module
// proxy by hack/versitygw.sh; make test sets OPR8R_VERSITYGW), serving a
// POSIX directory on 127.0.0.1, with one bucket.
type S3Server struct {
	Endpoint, AccessKey, SecretKey, Bucket, Dir string
	cmd                                         *exec.Cmd
	log                                         bytes.Buffer
}

// StartS3 starts versitygw over dir and creates the bucket.
func StartS3(dir, bucket string) (*S3Server, error) {
	bin := os.Getenv("OPR8R_VERSITYGW")
	if bin == "" {
		return nil, fmt.Errorf("OPR8R_VERSITYGW is not set: run the tests with make test, which builds versitygw (hack/versitygw.sh)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	s := &S3Server{Endpoint: addr, AccessKey: "opr8r-test-access", SecretKey: "opr8r-test-secret-key-1234", Bucket: bucket, Dir: dir}
	s.cmd = exec.Command(bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--port", addr, "--quiet", "posix", dir)
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	c, err := minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), Region: "us-east-1"})
	if err != nil {
		s.Stop()
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{Region: "us-east-1"})
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("versitygw on %s: %v\n%s", addr, err, s.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends the server.
func (s *S3Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}
