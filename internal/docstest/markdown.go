// Package docstest keeps the repository's Markdown true: its tests check
// the links, the folder map and the package table; its helpers read the
// tables that other packages' tests compare with the code.
package docstest

import (
	"regexp"
	"strings"
)

// TableRows are the cells of text's table rows, separator rows left out.
func TableRows(text string) [][]string {
	var out [][]string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") || strings.HasPrefix(l, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		out = append(out, cells)
	}
	return out
}

// TableKeys are the code spans in the first cells of text's table rows.
func TableKeys(text string) []string {
	var out []string
	for _, cells := range TableRows(text) {
		out = append(out, CodeSpans(cells[0])...)
	}
	return out
}

var codeSpanText = regexp.MustCompile("`([^`]+)`")

// CodeSpans are the texts of s's code spans, in order.
func CodeSpans(s string) []string {
	var out []string
	for _, m := range codeSpanText.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}
