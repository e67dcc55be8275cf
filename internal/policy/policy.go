// Package policy reads the approval policy file (TOLLGATE_POLICY_FILE): a
// rule per tool that says when its calls need a person's approval.
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// file is the policy file's shape:
//
//	tools:
//	  Bash:
//	    require: when
//	    when: args.command.startsWith("rm ") || args.command.contains("sudo")
//	    timeout: 10m
//	    deciders: [alice, "role:admin"]
//	    second_person: true
//	    quorum: 2
//	    declines: 2
//	    escalate:
//	      - {after: 50%, to: ["role:oncall", bob]}
//	      - {after: 8m, to: [carol]}
//	    sandbox: auto
//	    shadow:
//	      when: args.command.contains("sudo")
//	    examples:
//	      ask: [{command: "sudo reboot"}]
//	      allow: [{command: "ls"}]
type file struct {
	Tools map[string]struct {
		Require string `yaml:"require"`
		When    string `yaml:"when"`
		Timeout string `yaml:"timeout"`
		// Deciders are who may decide: principals, or role:NAME.
		Deciders []string `yaml:"deciders"`
		// SecondPerson refuses the decision of whoever sent the message.
		SecondPerson bool `yaml:"second_person"`
		// Quorum is how many approvals a call needs; Declines how many
		// declines decline it.
		Quorum   int `yaml:"quorum"`
		Declines int `yaml:"declines"`
		// Escalate are the steps that widen who may decide.
		Escalate []escalationSpec `yaml:"escalate"`
		// Sandbox, auto on Bash, lets contained calls run unasked.
		Sandbox string `yaml:"sandbox"`
		// Shadow is true when the entry's rule is a shadow rule, or the
		// shadow rule watched beside it.
		Shadow shadowSpec `yaml:"shadow"`
		// Examples are calls the rule must ask about and let through.
		Examples struct {
			Ask   []map[string]any `yaml:"ask"`
			Allow []map[string]any `yaml:"allow"`
		} `yaml:"examples"`
	} `yaml:"tools"`
}

// Load reads and checks the policy file at path. Every rule is compiled; the
// errors, all of them, name the tool and the expression, so a worker with a
// bad policy does not start.
func Load(path string) ([]Rule, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	rules, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("policy file %s: %w", path, err)
	}
	return rules, nil
}

// Parse reads a policy. Rules come out in tool-name order.
func Parse(data []byte) ([]Rule, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	var rules []Rule
	var errs []error
	for _, tool := range slices.Sorted(maps.Keys(f.Tools)) {
		spec := f.Tools[tool]
		r := Rule{Tool: tool, Require: spec.Require, When: spec.When, Deciders: spec.Deciders, SecondPerson: spec.SecondPerson, Sandbox: spec.Sandbox,
			Shadow: spec.Shadow.on, Quorum: spec.Quorum, Declines: spec.Declines}
		shadow, err := spec.Shadow.rule(tool)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if shadow != nil && r.Require == "" && r.When == "" && spec.Timeout == "" && len(spec.Deciders) == 0 && !spec.SecondPerson && spec.Sandbox == "" &&
			spec.Quorum == 0 && spec.Declines == 0 && len(spec.Escalate) == 0 {
			rules = append(rules, *shadow) // only watched: the tool has no live rule
			continue
		}
		if r.Require == "" && r.When != "" {
			r.Require = RequireWhen
		}
		if spec.Timeout != "" {
			d, err := time.ParseDuration(spec.Timeout)
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("tool %s: timeout %q is not a positive duration (example: 10m)", tool, spec.Timeout))
				continue
			}
			r.Timeout = d
		}
		for _, e := range spec.Escalate {
			r.Escalate = append(r.Escalate, e.step)
		}
		if err := r.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if r.Examples.Ask, err = exampleArguments(spec.Examples.Ask); err != nil {
			errs = append(errs, fmt.Errorf("tool %s: examples: ask: %w", tool, err))
			continue
		}
		if r.Examples.Allow, err = exampleArguments(spec.Examples.Allow); err != nil {
			errs = append(errs, fmt.Errorf("tool %s: examples: allow: %w", tool, err))
			continue
		}
		rules = append(rules, r)
		if shadow != nil {
			rules = append(rules, *shadow)
		}
	}
	return rules, errors.Join(errs...)
}

// shadowSpec is a tool entry's shadow (docs/policy.md, Shadow rules):
// true marks the entry's own rule a shadow rule; a mapping of require and
// when is a shadow rule watched beside the entry's live one.
type shadowSpec struct {
	on      bool
	require string
	when    string
	set     bool
}

// UnmarshalYAML reads true or false, or a mapping of require and when.
func (s *shadowSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		if err := n.Decode(&s.on); err != nil {
			return fmt.Errorf("shadow is true, false, or a rule of require and when: %w", err)
		}
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, value := n.Content[i], n.Content[i+1]
		var dst *string
		switch key.Value {
		case "require":
			dst = &s.require
		case "when":
			dst = &s.when
		default:
			return fmt.Errorf("line %d: shadow: field %s not found: a shadow rule takes require and when", key.Line, key.Value)
		}
		if err := value.Decode(dst); err != nil {
			return err
		}
	}
	s.set = true
	return nil
}

// rule is the shadow rule of tool that s holds, nil when none, checked.
func (s shadowSpec) rule(tool string) (*Rule, error) {
	if !s.set {
		return nil, nil
	}
	r := Rule{Tool: tool, Require: s.require, When: s.when, Shadow: true}
	if r.Require == "" && r.When != "" {
		r.Require = RequireWhen
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("shadow rule: %w", err)
	}
	return &r, nil
}

// escalationSpec is one step of a tool entry's escalate: after, a percent
// of the timeout ("50%") or a duration ("10m"), and to.
type escalationSpec struct{ step Escalation }

// UnmarshalYAML reads a step's after and to.
func (e *escalationSpec) UnmarshalYAML(n *yaml.Node) error {
	var raw struct {
		After string   `yaml:"after"`
		To    []string `yaml:"to"`
	}
	if err := n.Decode(&raw); err != nil {
		return fmt.Errorf("escalate: a step is {after: 50%% or 10m, to: [principals, role:NAME]}: %w", err)
	}
	e.step.To = raw.To
	after := strings.TrimSpace(raw.After)
	if pct, ok := strings.CutSuffix(after, "%"); ok {
		v, err := strconv.Atoi(strings.TrimSpace(pct))
		if err != nil || v <= 0 || v >= 100 {
			return fmt.Errorf("line %d: escalate: after %q is not a percent between 1%% and 99%%", n.Line, raw.After)
		}
		e.step.AfterPercent = v
		return nil
	}
	d, err := time.ParseDuration(after)
	if err != nil || d <= 0 {
		return fmt.Errorf("line %d: escalate: after %q is neither a percent of the timeout (50%%) nor a positive duration (10m)", n.Line, raw.After)
	}
	e.step.After = d
	return nil
}

// exampleArguments writes each example's arguments as the JSON object a
// model would send.
func exampleArguments(examples []map[string]any) ([]string, error) {
	var out []string
	for i, args := range examples {
		if args == nil {
			args = map[string]any{}
		}
		b, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("example %d: %w", i+1, err)
		}
		out = append(out, string(b))
	}
	return out, nil
}
