package jail

import "os"

// giveToGuest gives each of dirs to the host id id, the guest's for this
// run, before the init stage opens the binds' sources. The guest's host id
// is leased when the run starts, so no caller can do it ahead. The caller
// makes each directory its own and 0700, so that no other id can enter it
// before or after, and removes it once it has read what the guest wrote:
// the id goes to another job when the run ends.
func giveToGuest(dirs []string, id int) error {
	for _, dir := range dirs {
		if err := os.Lchown(dir, id, id); err != nil {
			return err
		}
	}
	return nil
}
