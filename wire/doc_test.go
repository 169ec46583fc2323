package wire

// The protocol document's layout blocks, vector links and error-code table
// are generated from the code (layouts in schema_test.go, the code table in
// codes.go). Each sits between markers:
//
//	<!-- generated:KEY -->
//	...
//	<!-- /generated -->
//
// TestGoldenDocBlocks fails when a block is missing or stale; -update
// rewrites the blocks in place (the prose around them is written by hand).

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var generatedBlock = regexp.MustCompile(`(?s)<!-- generated:([^>]+?) -->\n(.*?)<!-- /generated -->`)

// expectedDocBlocks returns every generated block's content by key.
func expectedDocBlocks() map[string]string {
	vectors := map[Tag][]string{}
	for _, c := range goldenCases() {
		vectors[c.frame.Tag()] = append(vectors[c.frame.Tag()], c.file+".hex")
	}
	blocks := map[string]string{}
	for _, tag := range Tags() {
		var out strings.Builder
		out.WriteString("```text\n" + renderLayout(tag) + "```\n")
		var links []string
		for _, file := range vectors[tag] {
			links = append(links, fmt.Sprintf("[`%s`](../testdata/wire/%s)", file, file))
		}
		out.WriteString("Golden vector: " + strings.Join(links, ", ") + "\n")
		blocks["layout "+tag.String()] = out.String()
	}
	blocks["codes"] = codeTableMarkdown()
	blocks["tags"] = tagTableMarkdown()
	return blocks
}

func codeTableMarkdown() string {
	var out strings.Builder
	out.WriteString("| code | name | closes the connection | retryable | meaning |\n")
	out.WriteString("|---:|---|---|---|---|\n")
	yesNo := map[bool]string{true: "yes", false: "no"}
	for _, code := range Codes() {
		fmt.Fprintf(&out, "| %d | `%s` | %s | %s | %s |\n", uint16(code), code,
			yesNo[code.ClosesConnection()], yesNo[code.Retryable()], code.Meaning())
	}
	return out.String()
}

func tagTableMarkdown() string {
	var out strings.Builder
	out.WriteString("| tag | frame | sent by | hot path |\n|---|---|---|---|\n")
	hot := map[Tag]bool{TagPublish: true, TagConfirm: true, TagPublishIdempotent: true, TagConfirmIdempotent: true, TagDeliver: true,
		TagAck: true, TagNack: true, TagRelease: true, TagDiscard: true, TagPush: true,
		TagProgress: true, TagProgressWritten: true, TagPage: true, TagPageAfter: true}
	for _, k := range kinds {
		mark := ""
		if hot[k.tag] {
			mark = "yes"
		}
		fmt.Fprintf(&out, "| `%s` | [%s](#%s) | %s | %s |\n", k.tag, k.name,
			strings.ToLower(k.tag.String())+"-"+k.name, k.from, mark)
	}
	return out.String()
}

func TestGoldenDocBlocks(t *testing.T) {
	raw, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	expected := expectedDocBlocks()
	found := map[string]bool{}
	var stale []string
	updated := generatedBlock.ReplaceAllStringFunc(doc, func(block string) string {
		match := generatedBlock.FindStringSubmatch(block)
		key, content := match[1], match[2]
		want, ok := expected[key]
		if !ok {
			t.Errorf("document has a generated block %q that the code does not know", key)
			return block
		}
		found[key] = true
		if content != want {
			stale = append(stale, key)
		}
		return "<!-- generated:" + key + " -->\n" + want + "<!-- /generated -->"
	})
	var missing []string
	for key := range expected {
		if !found[key] {
			missing = append(missing, key)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("document lacks generated blocks (add the markers by hand): %v", missing)
	}
	if *update {
		if err := os.WriteFile(protocolDoc, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if len(stale) > 0 {
		t.Errorf("stale generated blocks in %s (regenerate with -update): %v", protocolDoc, stale)
	}
}
