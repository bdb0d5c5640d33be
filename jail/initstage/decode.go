package initstage

import "io"

// decodeConfig reads the supervisor's configuration: one message, which
// the supervisor writes in one piece and follows with nothing until the
// report.
func decodeConfig(r io.Reader) (Config, error) {
	msg, err := readMessage(r, maxConfigSize)
	if err != nil {
		return Config{}, err
	}
	var cfg Config
	err = cfg.UnmarshalBinary(msg)
	return cfg, err
}
