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
//	    sandbox: auto
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
		// Sandbox, auto on Bash, lets contained calls run unasked.
		Sandbox string `yaml:"sandbox"`
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
		r := Rule{Tool: tool, Require: spec.Require, When: spec.When, Deciders: spec.Deciders, SecondPerson: spec.SecondPerson, Sandbox: spec.Sandbox}
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
		if err := r.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		var err error
		if r.Examples.Ask, err = exampleArguments(spec.Examples.Ask); err != nil {
			errs = append(errs, fmt.Errorf("tool %s: examples: ask: %w", tool, err))
			continue
		}
		if r.Examples.Allow, err = exampleArguments(spec.Examples.Allow); err != nil {
			errs = append(errs, fmt.Errorf("tool %s: examples: allow: %w", tool, err))
			continue
		}
		rules = append(rules, r)
	}
	return rules, errors.Join(errs...)
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
