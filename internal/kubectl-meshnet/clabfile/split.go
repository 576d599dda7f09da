package clabfile

import "errors"

// splitWords splits a command line into words as containerlab splits cmd,
// entrypoint and exec (the shlex rules of github.com/google/shlex): words
// are separated by spaces, tabs and newlines; '...' is literal; in "..."
// a backslash makes any next character literal; outside quotes a backslash
// makes the next character literal; quoted parts join the word they touch
// ("" alone is an empty word); a # that starts a word starts a comment to
// the end of the line. There is no variable expansion, globbing or
// redirection: a command needing them must run a shell itself.
func splitWords(s string) ([]string, error) {
	const (
		start = iota
		word
		single
		double
		comment
	)
	words := []string{}
	var cur []rune
	state := start
	runes := []rune(s)
	for i := 0; i < len(runes); i++ {
		r := runes[i]
		switch state {
		case start, word:
			switch {
			case r == ' ' || r == '\t' || r == '\r' || r == '\n':
				if state == word {
					words = append(words, string(cur))
					cur = cur[:0]
				}
				state = start
			case r == '#' && state == start:
				state = comment
			case r == '\'':
				state = single
			case r == '"':
				state = double
			case r == '\\':
				if i+1 == len(runes) {
					return nil, errors.New("ends with a backslash")
				}
				i++
				cur = append(cur, runes[i])
				state = word
			default:
				cur = append(cur, r)
				state = word
			}
		case single:
			if r == '\'' {
				state = word
			} else {
				cur = append(cur, r)
			}
		case double:
			switch r {
			case '"':
				state = word
			case '\\':
				if i+1 == len(runes) {
					return nil, errors.New("ends with a backslash")
				}
				i++
				cur = append(cur, runes[i])
			default:
				cur = append(cur, r)
			}
		case comment:
			if r == '\n' {
				state = start
			}
		}
	}
	switch state {
	case single, double:
		return nil, errors.New("a quote is not closed")
	case word:
		words = append(words, string(cur))
	}
	return words, nil
}
