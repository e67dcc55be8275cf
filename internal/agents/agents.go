// Package agents reads subagent definitions: Markdown files whose YAML front
// matter names the subagent and its tools and whose body is its system
// prompt, the format Claude Code uses.
package agents

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Def is a subagent definition: a Markdown file's YAML front matter
// (name, description, tools, disallowedTools, model) and its body, the
// subagent's system prompt. A definition that could not be read keeps its
// Error, which the model reads when it asks for that subagent. Turns record
// the definitions they start with (in their settings), as JSON.
type Def struct {
	Name            string   `json:"name"`
	Description     string   `json:"description"`
	Tools           []string `json:"tools,omitempty"`
	DisallowedTools []string `json:"disallowedTools,omitempty"`
	Model           string   `json:"model,omitempty"`
	Prompt          string   `json:"prompt"`
	Error           string   `json:"error,omitempty"`
}

// frontMatter is a definition's YAML header.
type frontMatter struct {
	Name            string   `yaml:"name"`
	Description     string   `yaml:"description"`
	Tools           nameList `yaml:"tools"`
	DisallowedTools nameList `yaml:"disallowedTools"`
	Model           string   `yaml:"model"`
}

// nameList is a YAML list of names or one comma-separated string of them
// ("Read, Bash"), as Claude Code writes it.
type nameList []string

// UnmarshalYAML accepts a sequence or a comma-separated scalar.
func (l *nameList) UnmarshalYAML(n *yaml.Node) error {
	var items []string
	switch n.Kind {
	case yaml.ScalarNode:
		items = strings.Split(n.Value, ",")
	case yaml.SequenceNode:
		if err := n.Decode(&items); err != nil {
			return err
		}
	default:
		return fmt.Errorf("line %d: want a list of tool names or a comma-separated string", n.Line)
	}
	for _, s := range items {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// Load reads every *.md file of dir, in name order. A file that is not a
// valid definition still yields a definition, named after the file, whose
// Error says what is wrong: the model reads it when it asks for that
// subagent. An empty dir means no subagents. Only a folder that cannot be
// read is an error.
func Load(dir string) ([]Def, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("agents folder %s: %w", dir, err)
	}
	var defs []Def
	for _, e := range entries {
		file := e.Name()
		stem, ok := strings.CutSuffix(file, ".md")
		if !ok || e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, file))
		def := Def{Name: stem}
		if err == nil {
			def, err = Parse(data)
		}
		if err != nil {
			def.Error = fmt.Sprintf("%s: %v", file, err)
			if def.Name == "" {
				def.Name = stem
			}
		}
		if slices.ContainsFunc(defs, func(d Def) bool { return d.Name == def.Name }) {
			def.Error = fmt.Sprintf("%s: a subagent named %q is defined twice", file, def.Name)
			def.Name += "@" + file
		}
		defs = append(defs, def)
	}
	return defs, nil
}

// Parse reads one definition.
func Parse(data []byte) (Def, error) {
	data = bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	rest, ok := bytes.CutPrefix(data, []byte("---\n"))
	if !ok {
		return Def{}, errors.New("no YAML front matter: the file must start with a line ---")
	}
	header, body, ok := bytes.Cut(rest, []byte("\n---"))
	if !ok {
		return Def{}, errors.New("the YAML front matter has no closing line ---")
	}
	var fm frontMatter
	dec := yaml.NewDecoder(bytes.NewReader(header))
	dec.KnownFields(true)
	if err := dec.Decode(&fm); err != nil {
		return Def{}, fmt.Errorf("front matter: %w", err)
	}
	def := Def{
		Name: strings.TrimSpace(fm.Name), Description: strings.TrimSpace(fm.Description),
		Tools: fm.Tools, DisallowedTools: fm.DisallowedTools, Model: strings.TrimSpace(fm.Model),
		Prompt: strings.TrimSpace(strings.TrimPrefix(string(body), "\n")),
	}
	switch {
	case def.Name == "":
		return def, errors.New("front matter: name is missing")
	case strings.ContainsAny(def.Name, " \t\n/"):
		return def, fmt.Errorf("front matter: name %q has a space or slash", def.Name)
	case def.Description == "":
		return def, errors.New("front matter: description is missing")
	case def.Prompt == "":
		return def, errors.New("the body (the subagent's system prompt) is empty")
	}
	return def, nil
}
