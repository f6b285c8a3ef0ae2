package step

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	git "github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/opr8r/opr8r/pkg/inputs"
	"github.com/opr8r/opr8r/pkg/names"
)

// CloneOptions fetches the module.
type CloneOptions struct {
	// Source is git, oci, dir, or inline (the files in Inputs).
	Source string
	// URL and Ref of a git source (Ref is a branch, tag or full commit
	// SHA) or of an OCI artifact (oci://registry/repository; Ref is a tag
	// or a sha256: digest).
	URL, Ref string
	// CredentialsDir holds, for git, token (and username) for https, or
	// identity and known_hosts for ssh; for OCI, .dockerconfigjson or
	// username and password.
	CredentialsDir string
	// Insecure allows an OCI registry served over plain HTTP.
	Insecure bool
	// From is the directory of a dir source (a mounted ConfigMap).
	From string
	// Dest receives the checkout.
	Dest string
	// Inputs are the run's inputs carried in the child (pkg/inputs), empty
	// when they are in a mounted ConfigMap. An inline source's files come
	// from them.
	Inputs string
	// VarsOut receives vars.json from Inputs, for the plan step.
	VarsOut string
}

var fullSHA = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Clone fetches the source into Dest and records the commit result: the
// git commit, the OCI artifact's manifest digest, or a dir source's tree
// digest. Git
// credentials are read from files into memory and handed to go-git: the
// step image has no git CLI, so there is no credential helper to configure,
// and nothing puts the credential in a URL, an argument or the environment.
func (r *Runner) Clone(ctx context.Context, o CloneOptions) error {
	if err := os.MkdirAll(o.Dest, 0o755); err != nil {
		return err
	}
	in, err := r.writeInputs(o)
	if err != nil {
		return err
	}
	switch o.Source {
	case "dir", "inline":
		var n int
		if o.Source == "dir" {
			n, err = copyPlainFiles(o.From, o.Dest)
		} else {
			n, err = writeFiles(in.Files, o.Dest)
		}
		if err != nil {
			return err
		}
		// The same files give the same revision, whether they came from a
		// ConfigMap or from the child.
		rev, err := TreeDigest(o.Dest)
		if err != nil {
			return err
		}
		r.logf("wrote %d files from the %s source (revision %s)", n, o.Source, rev)
		return r.WriteResult("commit", rev)
	case "oci":
		digest, err := r.cloneOCI(ctx, o)
		if err != nil {
			return err
		}
		r.logf("fetched %s at %s (digest %s)", o.URL, o.Ref, digest)
		return r.WriteResult("commit", digest)
	case "git":
	default:
		return fmt.Errorf("--source must be git, oci, dir or inline, not %q", o.Source)
	}
	auth, err := r.gitAuth(o.URL, o.CredentialsDir)
	if err != nil {
		return err
	}
	commit, err := r.fetchRef(ctx, o, auth)
	if err != nil {
		return fmt.Errorf("fetching %s at %s: %s", redactURL(o.URL), o.Ref, r.Redact(err.Error()))
	}
	r.logf("checked out %s at %s (commit %s)", redactURL(o.URL), o.Ref, commit)
	return r.WriteResult("commit", commit)
}

// writeInputs decodes the inputs carried in the child and writes vars.json
// to VarsOut.
func (r *Runner) writeInputs(o CloneOptions) (inputs.Inputs, error) {
	if o.Inputs == "" {
		if o.Source == "inline" {
			return inputs.Inputs{}, errors.New("--source=inline needs the inputs (--inputs-env names an empty or unset variable)")
		}
		return inputs.Inputs{}, nil
	}
	in, err := inputs.Decode(o.Inputs)
	if err != nil {
		return in, err
	}
	if o.VarsOut == "" {
		return in, errors.New("the inputs carry vars.json but --vars-out is not set")
	}
	if err := os.MkdirAll(filepath.Dir(o.VarsOut), 0o755); err != nil {
		return in, err
	}
	if err := os.WriteFile(o.VarsOut, []byte(in.Vars), 0o644); err != nil {
		return in, fmt.Errorf("writing vars.json: %w", err)
	}
	return in, nil
}

// writeFiles writes an inline source's files into dest, as copyPlainFiles
// copies them from a mounted ConfigMap.
func writeFiles(files map[string]string, dest string) (int, error) {
	if len(files) == 0 {
		return 0, errors.New("the inline source has no files")
	}
	for name, content := range files {
		if name != filepath.Base(name) || !names.ModuleFileName(name) {
			return 0, fmt.Errorf("the inline source's file name %q is not a plain file name", name)
		}
		if err := os.WriteFile(filepath.Join(dest, name), []byte(content), 0o644); err != nil {
			return 0, err
		}
	}
	return len(files), nil
}

// fetchRef checks out o.Ref. A full commit SHA (a preview's head) is
// fetched alone, at depth 1: the forges (Gitea, GitHub, GitLab) let a
// client ask for any commit reachable from a ref
// (uploadpack.allowReachableSHA1InWant). A server that refuses gets
// today's whole clone instead, said in the step's log.
func (r *Runner) fetchRef(ctx context.Context, o CloneOptions, auth transport.AuthMethod) (string, error) {
	if fullSHA.MatchString(o.Ref) {
		err := fetchCommit(ctx, o, auth)
		if err == nil {
			r.logf("fetched commit %s alone (depth 1)", o.Ref)
			return o.Ref, nil
		}
		if ctx.Err() != nil {
			return "", err
		}
		r.logf("the server did not give commit %s alone (%s); cloning the whole repository instead", o.Ref, r.Redact(err.Error()))
		return cloneAt(ctx, o, auth)
	}
	var lastErr error
	for _, ref := range []plumbing.ReferenceName{plumbing.NewBranchReferenceName(o.Ref), plumbing.NewTagReferenceName(o.Ref)} {
		_ = os.RemoveAll(filepath.Join(o.Dest, ".git"))
		repo, err := git.PlainCloneContext(ctx, o.Dest, false, &git.CloneOptions{
			URL: o.URL, Auth: auth, ReferenceName: ref, SingleBranch: true, Depth: 1, Tags: git.NoTags,
		})
		if err != nil {
			lastErr = err
			if errors.Is(err, plumbing.ErrReferenceNotFound) || strings.Contains(err.Error(), "couldn't find remote ref") || strings.Contains(err.Error(), "reference not found") {
				continue
			}
			return "", err
		}
		head, err := repo.Head()
		if err != nil {
			return "", err
		}
		return head.Hash().String(), nil
	}
	return "", fmt.Errorf("no branch or tag named %q: %w", o.Ref, lastErr)
}

// fetchCommit fetches commit o.Ref alone (depth 1) into a new repository
// at o.Dest and checks it out: git fetch --depth=1 origin <sha>.
func fetchCommit(ctx context.Context, o CloneOptions, auth transport.AuthMethod) error {
	_ = os.RemoveAll(filepath.Join(o.Dest, ".git"))
	repo, err := git.PlainInit(o.Dest, false)
	if err != nil {
		return err
	}
	if _, err := repo.CreateRemote(&gitconfig.RemoteConfig{Name: git.DefaultRemoteName, URLs: []string{o.URL}}); err != nil {
		return err
	}
	spec := gitconfig.RefSpec(o.Ref + ":refs/heads/opr8r")
	if err := repo.FetchContext(ctx, &git.FetchOptions{RemoteName: git.DefaultRemoteName, RefSpecs: []gitconfig.RefSpec{spec}, Depth: 1, Auth: auth, Tags: git.NoTags}); err != nil {
		return err
	}
	wt, err := repo.Worktree()
	if err != nil {
		return err
	}
	if err := wt.Checkout(&git.CheckoutOptions{Hash: plumbing.NewHash(o.Ref)}); err != nil {
		return fmt.Errorf("commit %s: %w", o.Ref, err)
	}
	return nil
}

// cloneAt clones the whole repository and checks out commit o.Ref.
func cloneAt(ctx context.Context, o CloneOptions, auth transport.AuthMethod) (string, error) {
	_ = os.RemoveAll(filepath.Join(o.Dest, ".git"))
	repo, err := git.PlainCloneContext(ctx, o.Dest, false, &git.CloneOptions{URL: o.URL, Auth: auth, NoCheckout: true, Tags: git.NoTags})
	if err != nil {
		return "", err
	}
	wt, err := repo.Worktree()
	if err != nil {
		return "", err
	}
	if err := wt.Checkout(&git.CheckoutOptions{Hash: plumbing.NewHash(o.Ref)}); err != nil {
		return "", fmt.Errorf("commit %s: %w", o.Ref, err)
	}
	return o.Ref, nil
}

// gitAuth reads credentials: token (+ username) for http(s), identity and
// known_hosts for ssh. Missing known_hosts is an error: host keys are always
// checked. The token, user:token (what basic auth encodes) and the ssh key
// are registered as secrets, in all their forms.
func (r *Runner) gitAuth(url, dir string) (transport.AuthMethod, error) {
	if dir == "" {
		return nil, nil
	}
	read := func(name string) (string, bool, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		return strings.TrimRight(string(b), "\r\n"), true, nil
	}
	if strings.HasPrefix(url, "http://") || strings.HasPrefix(url, "https://") {
		token, ok, err := read("token")
		if err != nil || !ok {
			return nil, fmt.Errorf("git credentials: the Secret has no \"token\" key for an https URL (%v)", err)
		}
		r.AddSecret(token)
		user, _, _ := read("username")
		if user == "" {
			user = "x-access-token"
		}
		// What basic auth sends: base64 of user:token (AddSecret adds it).
		r.AddSecret(user + ":" + token)
		return &githttp.BasicAuth{Username: user, Password: token}, nil
	}
	identity, ok, err := read("identity")
	if err != nil || !ok {
		return nil, fmt.Errorf("git credentials: the Secret has no \"identity\" key (an ssh private key) for an ssh URL (%v)", err)
	}
	// The key's lines and words are registered too (AddSecret): an error
	// that quotes part of it is still redacted.
	r.AddSecret(identity)
	user := "git"
	if i := strings.Index(url, "@"); i > 0 && !strings.Contains(url[:i], "/") {
		user = url[:i]
	} else if strings.HasPrefix(url, "ssh://") {
		if at := strings.Index(url[len("ssh://"):], "@"); at > 0 {
			user = url[len("ssh://") : len("ssh://")+at]
		}
	}
	keys, err := gitssh.NewPublicKeys(user, []byte(identity), "")
	if err != nil {
		return nil, fmt.Errorf("git credentials: the identity is not a usable ssh private key: %w", err)
	}
	khPath := filepath.Join(dir, "known_hosts")
	if _, err := os.Stat(khPath); err != nil {
		return nil, errors.New("git credentials: the Secret has no \"known_hosts\" key; host keys are always checked for ssh")
	}
	cb, err := knownhosts.New(khPath)
	if err != nil {
		return nil, fmt.Errorf("git credentials: known_hosts: %w", err)
	}
	keys.HostKeyCallback = cb
	return keys, nil
}

// redactURL removes any userinfo from a URL before it is printed.
func redactURL(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		rest := u[i+3:]
		if at := strings.Index(rest, "@"); at >= 0 && at < strings.IndexAny(rest+"/", "/") {
			return u[:i+3] + "***@" + rest[at+1:]
		}
	}
	return u
}

// copyPlainFiles copies the regular files of a mounted ConfigMap (skipping
// its ..data bookkeeping and other dot files, but not the lock file, which
// the kubelet mounts as a link like every key) into dest.
func copyPlainFiles(from, dest string) (int, error) {
	entries, err := os.ReadDir(from)
	if err != nil {
		return 0, fmt.Errorf("reading the source directory: %w", err)
	}
	n := 0
	for _, e := range entries {
		if !names.ModuleFileName(e.Name()) {
			continue
		}
		src := filepath.Join(from, e.Name())
		st, err := os.Stat(src) // follows ConfigMap symlinks
		if err != nil || st.IsDir() {
			continue
		}
		if err := copyFile(src, filepath.Join(dest, e.Name()), 0o644); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("the source %s has no files", from)
	}
	return n, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
