package initstage

// StepLayers returns the layer of every step in the table, in order.
func StepLayers() []Layer {
	layers := make([]Layer, len(steps))
	for i, st := range steps {
		layers[i] = st.layer
	}
	return layers
}
