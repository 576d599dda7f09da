package pcapfilter

import "fmt"

// syntaxError is a parse error; pos orders the errors of alternatives so
// the one that got furthest is reported.
type syntaxError struct {
	pos int
	msg string
}

func (e *syntaxError) Error() string { return e.msg }

type parser struct {
	toks []token
	pos  int
}

// supportedSummary lists what Compile takes, for the error that refuses
// the rest.
const supportedSummary = "supported: ip, ip6, arp, rarp, tcp, udp, sctp, icmp, icmp6, igmp, igrp, pim, vrrp, carp, ah, esp; " +
	"[src|dst] host, net, port, portrange; proto; ether host/src/dst/proto; broadcast, multicast; " +
	"less, greater, len; proto[offset:size] comparisons; and, or, not, parentheses"

var supportedKeywords = map[string]bool{
	"and": true, "or": true, "not": true, "src": true, "dst": true,
	"host": true, "net": true, "mask": true, "port": true, "portrange": true,
	"proto": true, "less": true, "greater": true, "broadcast": true,
	"multicast": true, "len": true,
}

func parse(toks []token) (expr, error) {
	for _, t := range toks {
		if _, isProto := protoKeywords[t.kw]; t.kind == tKW && !supportedKeywords[t.kw] && !isProto {
			return nil, fmt.Errorf("%q is not supported by meshnet's capture filter (%s)", t.text, supportedSummary)
		}
	}
	p := &parser{toks: toks}
	e, _, err := p.parseExpr(qerr)
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, p.unexpected(t)
	}
	return e, nil
}

func (p *parser) peek() token { return p.toks[p.pos] }

func (p *parser) peekAt(k int) token {
	if p.pos+k >= len(p.toks) {
		return p.toks[len(p.toks)-1]
	}
	return p.toks[p.pos+k]
}

func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tEOF {
		p.pos++
	}
	return t
}

func isPunct(t token, op string) bool { return t.kind == tPunct && t.kw == op }
func isKW(t token, kw string) bool    { return t.kind == tKW && t.kw == kw }

// unexpected is the syntax error for t.
func (p *parser) unexpected(t token) error {
	switch {
	case t.kind == tEOF:
		if p.pos == 0 {
			return &syntaxError{t.pos, "unexpected end"}
		}
		return &syntaxError{t.pos, fmt.Sprintf("unexpected end after %q", p.toks[p.pos-1].text)}
	case isPunct(t, ")"):
		return &syntaxError{t.pos, fmt.Sprintf(`unbalanced ")" at offset %d`, t.pos)}
	case t.kind == tHID || t.kind == tHID6 || t.kind == tEID || t.kind == tNum && p.pos == 0:
		return &syntaxError{t.pos, fmt.Sprintf(`unexpected %q at offset %d (a value needs a qualifier: "host %s", "net %s", "port %s"...)`, t.text, t.pos, t.text, t.text, t.text)}
	}
	return &syntaxError{t.pos, fmt.Sprintf("unexpected %q at offset %d", t.text, t.pos)}
}

// furthest is the error of the alternative that read further.
func furthest(a, b error) error {
	sa, oka := a.(*syntaxError)
	sb, okb := b.(*syntaxError)
	if oka && okb && sb.pos > sa.pos {
		return b
	}
	return a
}

// parseExpr reads term {and|or term-or-value}: and and or have equal
// precedence and associate left to right. prev is the qualifier the first
// term's parenthesis inherits.
func (p *parser) parseExpr(prev qual) (expr, qual, error) {
	e, q, err := p.parseTerm(prev)
	if err != nil {
		return nil, q, err
	}
	for {
		t := p.peek()
		if t.kind != tAnd && t.kind != tOr {
			return e, q, nil
		}
		p.next()
		if p.peek().kind == tEOF {
			return nil, q, p.unexpected(p.peek())
		}
		r, q2, err := p.parseRHS(q)
		if err != nil {
			return nil, q, err
		}
		e, q = exBin{and: t.kind == tAnd, l: e, r: r}, q2
	}
}

func followsExpr(t token) bool {
	return t.kind == tAnd || t.kind == tOr || t.kind == tEOF || isPunct(t, ")")
}

func startsID(t token) bool {
	switch t.kind {
	case tNum, tID, tHID, tHID6, tEID, tNot:
		return true
	}
	return isPunct(t, "(")
}

// parseRHS reads what follows "and" or "or": a bare value that inherits
// prev ("host 10.0.0.1 or 10.0.0.2") or a term.
func (p *parser) parseRHS(prev qual) (expr, qual, error) {
	if !startsID(p.peek()) {
		return p.parseTerm(prev)
	}
	start := p.pos
	e, err := p.parseID(prev)
	if err == nil {
		if followsExpr(p.peek()) {
			return e, prev, nil
		}
		err = p.unexpected(p.peek())
	}
	p.pos = start
	e2, q2, err2 := p.parseTerm(prev)
	if err2 == nil {
		return e2, q2, nil
	}
	return nil, q2, furthest(err, err2)
}

func (p *parser) parseTerm(prev qual) (expr, qual, error) {
	if p.peek().kind == tNot {
		p.next()
		e, q, err := p.parseTerm(prev)
		if err != nil {
			return nil, q, err
		}
		return exNot{e}, q, nil
	}
	return p.parseRterm(prev)
}

func isHeadKW(t token) bool {
	if t.kind != tKW {
		return false
	}
	switch t.kw {
	case "src", "dst", "host", "net", "port", "portrange", "proto":
		return true
	}
	return false
}

func (p *parser) parseRterm(prev qual) (expr, qual, error) {
	t := p.peek()
	switch {
	case isPunct(t, "("):
		start := p.pos
		p.next()
		e, _, err := p.parseExpr(prev)
		if err == nil {
			if isPunct(p.peek(), ")") {
				p.next()
				return e, prev, nil
			}
			if p.peek().kind == tEOF {
				err = &syntaxError{p.peek().pos, fmt.Sprintf(`missing ")" for the "(" at offset %d`, t.pos)}
			} else {
				err = p.unexpected(p.peek())
			}
		}
		p.pos = start
		rel, err2 := p.parseRelation()
		if err2 == nil {
			return rel, qerr, nil
		}
		return nil, qerr, furthest(err, err2)
	case t.kind == tNum || isKW(t, "len") || isPunct(t, "-"):
		rel, err := p.parseRelation()
		return rel, qerr, err
	case t.kind != tKW:
		return nil, qerr, p.unexpected(t)
	}
	if pr, ok := protoKeywords[t.kw]; ok {
		nt := p.peekAt(1)
		switch {
		case isPunct(nt, "["):
			rel, err := p.parseRelation()
			return rel, qerr, err
		case isKW(nt, "broadcast") || isKW(nt, "multicast"):
			p.next()
			p.next()
			return exOther{tok: nt, p: pr, ptk: t}, qerr, nil
		case isHeadKW(nt):
			return p.parseHeadID()
		}
		p.next()
		return exAbbrev{tok: t, p: pr}, qerr, nil
	}
	switch t.kw {
	case "src", "dst", "host", "net", "port", "portrange", "proto":
		return p.parseHeadID()
	case "broadcast", "multicast":
		p.next()
		return exOther{tok: t, p: pDefault}, qerr, nil
	case "less", "greater":
		p.next()
		n := p.peek()
		if n.kind != tNum {
			return nil, qerr, &syntaxError{n.pos, fmt.Sprintf("%q needs a number, not %s", t.text, n)}
		}
		p.next()
		return exOther{tok: t, num: n.num}, qerr, nil
	}
	return nil, qerr, p.unexpected(t)
}

// parseHeadID reads [proto] [dir] [type] value.
func (p *parser) parseHeadID() (expr, qual, error) {
	q := qual{pDefault, dDefault, aDefault}
	if t := p.peek(); t.kind == tKW {
		if pr, ok := protoKeywords[t.kw]; ok {
			q.proto = pr
			p.next()
		}
	}
	t := p.peek()
	switch {
	case isKW(t, "src") || isKW(t, "dst"):
		p.next()
		q.dir = dSrc
		other := "dst"
		if t.kw == "dst" {
			q.dir, other = dDst, "src"
		}
		if c := p.peek(); (c.kind == tAnd || c.kind == tOr) && isKW(p.peekAt(1), other) {
			p.next()
			p.next()
			q.dir = dOr
			if c.kind == tAnd {
				q.dir = dAnd
			}
		}
		switch n := p.peek(); {
		case isKW(n, "host"):
			q.addr = aHost
		case isKW(n, "net"):
			q.addr = aNet
		case isKW(n, "port"):
			q.addr = aPort
		case isKW(n, "portrange"):
			q.addr = aPortrange
		}
		if q.addr != aDefault {
			p.next()
		}
	case isKW(t, "host"):
		q.addr = aHost
		p.next()
	case isKW(t, "net"):
		q.addr = aNet
		p.next()
	case isKW(t, "port"):
		q.addr = aPort
		p.next()
	case isKW(t, "portrange"):
		q.addr = aPortrange
		p.next()
	case isKW(t, "proto"):
		q.addr = aProto
		p.next()
	default:
		return nil, q, p.unexpected(t)
	}
	e, err := p.parseID(q)
	return e, q, err
}

// parseID reads a value with the qualifiers q: an address, number or name,
// "not" value, or a parenthesised list of values joined by and/or.
func (p *parser) parseID(q qual) (expr, error) {
	t := p.peek()
	switch t.kind {
	case tNot:
		p.next()
		if p.peek().kind == tEOF {
			return nil, p.unexpected(p.peek())
		}
		e, err := p.parseID(q)
		if err != nil {
			return nil, err
		}
		return exNot{e}, nil
	case tNum, tID, tEID:
		p.next()
		return exID{q: q, tok: t}, nil
	case tHID, tHID6:
		p.next()
		e := exID{q: q, tok: t}
		if n := p.peekAt(1); isPunct(p.peek(), "/") && n.kind == tNum {
			e.masklen = &n
			p.next()
			p.next()
		} else if t.kind == tHID && isKW(p.peek(), "mask") && n.kind == tHID {
			e.mask = &n
			p.next()
			p.next()
		}
		return e, nil
	}
	if !isPunct(t, "(") {
		return nil, p.unexpected(t)
	}
	p.next()
	e, err := p.parseID(q)
	if err != nil {
		return nil, err
	}
	for {
		c := p.peek()
		if isPunct(c, ")") {
			p.next()
			return e, nil
		}
		if c.kind != tAnd && c.kind != tOr {
			if c.kind == tEOF {
				return nil, &syntaxError{c.pos, fmt.Sprintf(`missing ")" for the "(" at offset %d`, t.pos)}
			}
			return nil, p.unexpected(c)
		}
		p.next()
		if p.peek().kind == tEOF {
			return nil, p.unexpected(p.peek())
		}
		r, err := p.parseID(q)
		if err != nil {
			return nil, err
		}
		e = exBin{and: c.kind == tAnd, l: e, r: r}
	}
}

var relops = map[string]bool{">": true, ">=": true, "=": true, "<=": true, "<": true, "!=": true}

func (p *parser) parseRelation() (expr, error) {
	a0, err := p.parseArith()
	if err != nil {
		return nil, err
	}
	op := p.peek()
	if op.kind != tPunct || !relops[op.kw] {
		if op.kind == tEOF {
			return nil, &syntaxError{op.pos, "unexpected end: a comparison (=, !=, <, <=, >, >=) is missing"}
		}
		return nil, &syntaxError{op.pos, fmt.Sprintf("unexpected %q at offset %d: a comparison (=, !=, <, <=, >, >=) is missing", op.text, op.pos)}
	}
	p.next()
	a1, err := p.parseArith()
	if err != nil {
		return nil, err
	}
	return exRel{op: op, a0: a0, a1: a1}, nil
}

// arithPrec is the precedence of libpcap's binary operators (grammar.y's
// %left lines); % and ^ have none, so bison shifts on them: they take
// everything to their right as their right operand.
var arithPrec = map[string]int{"|": 1, "&": 2, "<<": 3, ">>": 3, "+": 4, "-": 4, "*": 5, "/": 5}

func isArithOp(t token) bool {
	if t.kind != tPunct {
		return false
	}
	_, ok := arithPrec[t.kw]
	return ok || t.kw == "%" || t.kw == "^"
}

// parseArith reads an arithmetic expression with the precedence bison
// gives libpcap's grammar.
func (p *parser) parseArith() (*arth, error) {
	x, err := p.parsePrimary()
	if err != nil {
		return nil, err
	}
	vals := []*arth{x}
	var ops []token
	reduce := func() {
		op := ops[len(ops)-1]
		ops = ops[:len(ops)-1]
		l, r := vals[len(vals)-2], vals[len(vals)-1]
		vals = append(vals[:len(vals)-2], &arth{kind: arBin, tok: op, op: op.kw, l: l, r: r})
	}
	for isArithOp(p.peek()) {
		op := p.next()
		for len(ops) > 0 {
			p1, ok1 := arithPrec[ops[len(ops)-1].kw]
			p2, ok2 := arithPrec[op.kw]
			if !ok1 || !ok2 || p1 < p2 {
				break
			}
			reduce()
		}
		ops = append(ops, op)
		x, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		vals = append(vals, x)
	}
	for len(ops) > 0 {
		reduce()
	}
	return vals[0], nil
}

func (p *parser) parsePrimary() (*arth, error) {
	t := p.peek()
	switch {
	case t.kind == tNum:
		p.next()
		return &arth{kind: arNum, tok: t, num: t.num, lit: true}, nil
	case isKW(t, "len"):
		p.next()
		return &arth{kind: arLen, tok: t}, nil
	case isPunct(t, "-"):
		return nil, &syntaxError{t.pos, fmt.Sprintf(`unary minus at offset %d is not supported (write "0 - x")`, t.pos)}
	case isPunct(t, "("):
		p.next()
		a, err := p.parseArith()
		if err != nil {
			return nil, err
		}
		if c := p.peek(); !isPunct(c, ")") {
			if c.kind == tEOF {
				return nil, &syntaxError{c.pos, fmt.Sprintf(`missing ")" for the "(" at offset %d`, t.pos)}
			}
			return nil, p.unexpected(c)
		}
		p.next()
		return a, nil
	case t.kind == tKW:
		pr, ok := protoKeywords[t.kw]
		if !ok {
			break
		}
		p.next()
		if !isPunct(p.peek(), "[") {
			return nil, p.unexpected(p.peek())
		}
		p.next()
		idx, err := p.parseArith()
		if err != nil {
			return nil, err
		}
		a := &arth{kind: arLoad, tok: t, p: pr, idx: idx}
		if isPunct(p.peek(), ":") {
			p.next()
			if p.peek().kind != tNum {
				return nil, p.unexpected(p.peek())
			}
			a.size = p.next()
		}
		if c := p.peek(); !isPunct(c, "]") {
			if c.kind == tEOF {
				return nil, &syntaxError{c.pos, fmt.Sprintf(`missing "]" for the "[" after %q at offset %d`, t.text, t.pos)}
			}
			return nil, p.unexpected(c)
		}
		p.next()
		return a, nil
	}
	return nil, p.unexpected(t)
}
