package jsonstr

// Outside follows a JSON text byte by byte and tells which bytes lie
// outside its strings: brackets and commas inside a string are the
// string's, not the structure's. It does not validate the text.
type Outside struct {
	inString, escaped bool
}

// Next reports whether c, the text's next byte, lies outside every string
// (a string's quotes count as inside it).
func (o *Outside) Next(c byte) bool {
	if o.inString {
		switch {
		case o.escaped:
			o.escaped = false
		case c == '\\':
			o.escaped = true
		case c == '"':
			o.inString = false
		}
		return false
	}
	if c == '"' {
		o.inString = true
		return false
	}
	return true
}
