# A handler module on Pyodide: main gets the job's input; the `pmjail`
# module is the broker. What main returns becomes the result's value.
import pmjail


def main(input, ctx):
    name = (input or {}).get("name", "world")
    pmjail.log.info("greeting", {"name": name})
    return {"greeting": f"hello, {name}"}
