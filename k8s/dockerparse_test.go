package k8s

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// instruction is one Dockerfile instruction with its continuation lines
// joined, as Docker reads it.
type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY, …
	args string // the rest of the instruction, as written
	line int    // where it starts
}

// stage is one FROM and the instructions after it.
type stage struct {
	from         string // the image reference
	name         string // the AS name; empty if none
	instructions []instruction
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.instructions {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// last returns the stage's last instruction cmd; ok is false if it has none.
func (s stage) last(cmd string) (instruction, bool) {
	all := s.all(cmd)
	if len(all) == 0 {
		return instruction{}, false
	}
	return all[len(all)-1], true
}

// parseDockerfile reads the subset of Dockerfile syntax this project uses:
// comments, backslash continuations and one instruction per logical line.
func parseDockerfile(r io.Reader) ([]stage, error) {
	var stages []stage
	var pending strings.Builder
	start := 0
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue // Docker drops comment lines, inside continuations too
		}
		if pending.Len() == 0 {
			start = n
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			pending.WriteString(body)
			continue
		}
		pending.WriteString(line)
		cmd, args, _ := strings.Cut(strings.TrimSpace(pending.String()), " ")
		pending.Reset()
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			words := strings.Fields(in.args)
			for len(words) > 0 && strings.HasPrefix(words[0], "--") {
				words = words[1:]
			}
			if len(words) == 0 {
				return nil, fmt.Errorf("line %d: FROM without an image", start)
			}
			s := stage{from: words[0]}
			if len(words) == 3 && strings.EqualFold(words[1], "AS") {
				s.name = words[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				continue // an ARG before the first FROM
			}
			return nil, fmt.Errorf("line %d: %s before FROM", start, in.cmd)
		}
		stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, in)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if pending.Len() > 0 {
		return nil, fmt.Errorf("line %d: continuation at the end of the file", start)
	}
	return stages, nil
}

// execForm decodes a JSON array argument (ENTRYPOINT ["/bin"], CMD [...]).
// ok is false for the shell form, which needs a shell the image lacks.
func execForm(args string) (argv []string, ok bool) {
	if err := json.Unmarshal([]byte(args), &argv); err != nil || len(argv) == 0 {
		return nil, false
	}
	return argv, true
}

// stripFlags removes the leading --flag=value options of RUN, COPY and
// HEALTHCHECK.
func stripFlags(args string) (rest string, flags []string) {
	rest = strings.TrimSpace(args)
	for strings.HasPrefix(rest, "--") {
		flag, after, _ := strings.Cut(rest, " ")
		flags = append(flags, flag)
		rest = strings.TrimSpace(after)
	}
	return rest, flags
}

// ignoreRule is one line of a .dockerignore file.
type ignoreRule struct {
	pattern *regexp.Regexp
	negate  bool // an exception: "!pattern"
}

// parseDockerignore reads .dockerignore with Docker's rules: patterns are
// relative to the context root (no implicit "**/" as in .gitignore), "**"
// spans directories, a leading "!" makes an exception, the last matching
// line wins, and a match on a directory excludes everything below it.
func parseDockerignore(r io.Reader) ([]ignoreRule, error) {
	var rules []ignoreRule
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var rule ignoreRule
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			rule.negate, line = true, strings.TrimSpace(rest)
		}
		line = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(line)), "/")
		re, err := regexp.Compile(ignorePatternToRegexp(line))
		if err != nil {
			return nil, fmt.Errorf(".dockerignore %q: %w", line, err)
		}
		rule.pattern = re
		rules = append(rules, rule)
	}
	return rules, sc.Err()
}

func ignorePatternToRegexp(pattern string) string {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; {
		case strings.HasPrefix(pattern[i:], "**/"):
			b.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(pattern[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return b.String()
}

// excluded says whether the context path rel (slash-separated) stays out of
// the build context.
func excluded(rules []ignoreRule, rel string) bool {
	out := false
	for _, rule := range rules {
		if matchesOrParent(rule.pattern, rel) {
			out = !rule.negate
		}
	}
	return out
}

func matchesOrParent(re *regexp.Regexp, rel string) bool {
	for p := rel; ; {
		if re.MatchString(p) {
			return true
		}
		i := strings.LastIndex(p, "/")
		if i < 0 {
			return false
		}
		p = p[:i]
	}
}

// copyContext copies the build context Docker would send: every file under
// root that .dockerignore does not exclude.
func copyContext(root, dst string, rules []ignoreRule) error {
	return filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if excluded(rules, rel) {
			if d.IsDir() && !hasExceptions(rules) {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			return os.WriteFile(target, data, 0o644)
		}
		return nil // sockets, symlinks: not part of a Go build
	})
}

func hasExceptions(rules []ignoreRule) bool {
	for _, r := range rules {
		if r.negate {
			return true
		}
	}
	return false
}
